package lightq

import (
	"bufio"
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	_ "net/http/pprof"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/term"

	"github.com/lightq/lightq/broker"
	"github.com/lightq/lightq/broker/auth"
)

//go:embed default.conf
var defaultConf string

// Main is the whole of the lightq command, so that tests run it in-process: it starts the
// broker and serves until ctx ends, then shuts down gracefully. It returns the process exit
// code: 0 after a clean shutdown, 1 when the broker fails, 2 on bad usage.
func Main(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	settings, err := parseConf(defaultConf, "embedded default.conf")
	if err != nil {
		fmt.Fprintln(stderr, "lightq:", err)
		return 1
	}
	fs := flag.NewFlagSet("lightq", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: lightq [flags]\n\nThe LightQ message broker. Every flag can also be set by the environment variable\nLIGHTQ_<FLAG> (dashes become underscores) or in a --config file.\n\nFlags:\n")
		fs.PrintDefaults()
		fmt.Fprintf(stderr, "\nEnvironment only: LIGHTQ_ADMIN_PASSWORD (admin password).\n")
	}
	flagVals := map[string]*string{}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		flagVals[k] = fs.String(k, settings[k], confHelp[k])
	}
	configFile := fs.String("config", "", "read settings from this file (key = value lines, as --print-config shows)")
	printConfig := fs.Bool("print-config", false, "print the embedded default configuration and exit")
	pprofAddr := fs.String("pprof-addr", "", "serve net/http/pprof on this address (debugging; keep it on loopback)")
	fetchCopy := fs.Bool("fetch-copy", false, "send FETCH data with read+write instead of sendfile (for comparing the two)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "lightq: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *printConfig {
		fmt.Fprint(stdout, defaultConf)
		return 0
	}
	// Layer: defaults < config file < environment < flags.
	if *configFile != "" {
		data, err := os.ReadFile(*configFile)
		if err != nil {
			fmt.Fprintln(stderr, "lightq:", err)
			return 2
		}
		fileSettings, err := parseConf(string(data), *configFile)
		if err != nil {
			fmt.Fprintln(stderr, "lightq:", err)
			return 2
		}
		for k, v := range fileSettings {
			if _, ok := settings[k]; !ok {
				fmt.Fprintf(stderr, "lightq: %s: unknown setting %q\n", *configFile, k)
				return 2
			}
			settings[k] = v
		}
	}
	for k := range settings {
		if v := getenv(envName(k)); v != "" {
			settings[k] = v
		}
	}
	fs.Visit(func(f *flag.Flag) {
		if p, ok := flagVals[f.Name]; ok {
			settings[f.Name] = *p
		}
	})

	cfg, err := buildConfig(settings, getenv, stderr)
	cfg.FetchCopy = *fetchCopy
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		fmt.Fprintln(stderr, "lightq:", err)
		return 2
	}
	if *pprofAddr != "" {
		go func() {
			err := http.ListenAndServe(*pprofAddr, nil)
			cfg.Logger.Error().Err(err).Msg("pprof server stopped")
		}()
	}
	if cfg.EventLoops == 0 {
		cfg.EventLoops = defaultEventLoops()
	}
	if procs, set := reserveLoopProcs(cfg.EventLoops, getenv); set {
		cfg.Logger.Debug().Int("gomaxprocs", procs).Msg("one P per event loop on top of one per CPU")
	}
	srv, err := broker.New(cfg)
	if err != nil {
		cfg.Logger.Error().Err(err).Msg("cannot start")
		return 1
	}
	if err := srv.Start(); err != nil {
		cfg.Logger.Error().Err(err).Msg("cannot start")
		return 1
	}
	waitErr := make(chan error, 1)
	go func() { waitErr <- srv.Wait() }()
	select {
	case <-ctx.Done():
		cfg.Logger.Info().Msg("signal received")
		shutCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownDrain+10*time.Second)
		defer cancel()
		if err := srv.Shutdown(shutCtx); err != nil {
			cfg.Logger.Error().Err(err).Msg("shutdown")
			return 1
		}
		return 0
	case err := <-waitErr:
		cfg.Logger.Error().Err(err).Msg("event loops stopped")
		return 1
	}
}

var confHelp = map[string]string{
	"addr":             "listen address (host:port)",
	"data-dir":         "directory for metadata and credentials",
	"log-level":        "debug, info, warn or error",
	"log-format":       "json, console or auto (console on a terminal)",
	"admin-user":       "admin user name (password: LIGHTQ_ADMIN_PASSWORD)",
	"max-batch":        "largest record batch in bytes",
	"max-message":      "largest record (key+value+headers) in bytes",
	"auth-timeout":     "time a new connection has to authenticate",
	"event-loops":      "event loops (0 = one per CPU)",
	"read-buffer":      "bytes one read hands to the protocol at most",
	"high-water-mark":  "bytes queued per connection before sending to it pauses",
	"ring-bytes":       "memory of one transient partition",
	"ring-slots":       "batches one transient partition holds at most",
	"max-ring-memory":  "ring memory of all transient topics together",
	"hash-params":      "argon2id parameters for new credential hashes",
	"shutdown-drain":   "time to flush output on shutdown",
	"transfer-timeout": "close a connection whose FETCH response makes no progress for this long",
}

func envName(key string) string {
	return "LIGHTQ_" + strings.ToUpper(strings.ReplaceAll(key, "-", "_"))
}

// parseConf reads key = value lines; # starts a comment.
func parseConf(text, name string) (map[string]string, error) {
	out := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for line := 1; sc.Scan(); line++ {
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		k, v, ok := strings.Cut(s, "=")
		if !ok {
			return nil, fmt.Errorf("%s:%d: want key = value, got %q", name, line, s)
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return out, sc.Err()
}

// buildConfig turns the merged settings into a broker configuration.
func buildConfig(set map[string]string, getenv func(string) string, stderr io.Writer) (broker.Config, error) {
	cfg := broker.DefaultConfig()
	var errs []error
	num := func(key string) int {
		v, err := strconv.Atoi(set[key])
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %q is not an integer", key, set[key]))
		}
		return v
	}
	dur := func(key string) time.Duration {
		v, err := time.ParseDuration(set[key])
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %q is not a duration", key, set[key]))
		}
		return v
	}
	cfg.Addr = set["addr"]
	cfg.DataDir = set["data-dir"]
	cfg.AdminUser = set["admin-user"]
	cfg.AdminPassword = getenv("LIGHTQ_ADMIN_PASSWORD")
	cfg.Limits.MaxBatch = num("max-batch")
	cfg.Limits.MaxFrame = cfg.Limits.MaxBatch + 1024
	cfg.Limits.MaxMessage = num("max-message")
	cfg.Limits.AuthTimeout = dur("auth-timeout")
	cfg.EventLoops = num("event-loops")
	cfg.ReadBufferCap = num("read-buffer")
	cfg.HighWaterMark = num("high-water-mark")
	cfg.RingBytes = num("ring-bytes")
	cfg.RingSlots = num("ring-slots")
	if v, err := strconv.ParseInt(set["max-ring-memory"], 10, 64); err != nil {
		errs = append(errs, fmt.Errorf("max-ring-memory: %q is not an integer", set["max-ring-memory"]))
	} else {
		cfg.MaxRingMemory = v
	}
	cfg.ShutdownDrain = dur("shutdown-drain")
	cfg.TransferTimeout = dur("transfer-timeout")
	p, err := parseHashParams(set["hash-params"])
	if err != nil {
		errs = append(errs, err)
	}
	cfg.HashParams = p
	level, err := zerolog.ParseLevel(set["log-level"])
	if err != nil || set["log-level"] == "" {
		errs = append(errs, fmt.Errorf("log-level: %q is not one of debug, info, warn, error", set["log-level"]))
	}
	var w io.Writer = stderr
	switch set["log-format"] {
	case "json":
	case "console":
		w = zerolog.ConsoleWriter{Out: stderr, TimeFormat: time.RFC3339}
	case "auto":
		if f, ok := stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			w = zerolog.ConsoleWriter{Out: stderr, TimeFormat: time.RFC3339}
		}
	default:
		errs = append(errs, fmt.Errorf("log-format: %q is not json, console or auto", set["log-format"]))
	}
	cfg.Logger = zerolog.New(w).Level(level).With().Timestamp().Logger()
	return cfg, errors.Join(errs...)
}

// parseHashParams reads "m=19456,t=2,p=1".
func parseHashParams(s string) (auth.Params, error) {
	var p auth.Params
	var seen int
	for _, part := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return p, fmt.Errorf("hash-params: %q: %q is not a number", s, v)
		}
		switch k {
		case "m":
			p.MemoryKiB = uint32(n)
		case "t":
			p.Time = uint32(n)
		case "p":
			if n > 255 {
				return p, fmt.Errorf("hash-params: p=%d over 255", n)
			}
			p.Threads = uint8(n)
		default:
			return p, fmt.Errorf("hash-params: unknown key %q (want m, t, p)", k)
		}
		seen++
	}
	if seen != 3 {
		return p, fmt.Errorf("hash-params: %q needs m, t and p", s)
	}
	if err := p.Validate(); err != nil {
		return p, fmt.Errorf("hash-params: %q: %w", s, err)
	}
	return p, nil
}
