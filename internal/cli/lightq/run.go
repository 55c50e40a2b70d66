package lightq

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	_ "net/http/pprof"
	"sort"
	"time"

	"github.com/lightq/lightq/broker"
	"github.com/lightq/lightq/internal/version"
)

// Main is the whole of the lightq command, so that tests run it in-process: it layers the
// settings (embedded default.conf < --config file < $LIGHTQ_* < flags), starts the broker and
// serves until ctx ends, then shuts down gracefully. It returns the process exit code: 0 after
// a clean shutdown (or --help, --print-config, --version), 1 when the broker fails, 2 on bad usage.
//
// Main may be called more than once in a process (tests do). It sets GOMAXPROCS for the
// process (see reserveLoopProcs) unless $GOMAXPROCS is set.
func Main(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	settings, err := parseConf(defaultConf, "embedded default.conf")
	if err != nil {
		fmt.Fprintln(stderr, "lightq:", err)
		return 1
	}
	fs := flag.NewFlagSet("lightq", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: lightq [flags]\n\nThe LightQ message broker. Every flag can also be set by the environment variable\nLIGHTQ_<FLAG> (dashes become underscores) or in a --config file. Sizes are bytes or take a\nunit: KB, MB, GB (powers of 1000) or KiB, MiB, GiB (powers of 1024), as in 64MiB.\n\nFlags:\n")
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
	printVersion := fs.Bool("version", false, "print the version (module, VCS revision and time, Go) and exit")
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
	if *printVersion {
		fmt.Fprintln(stdout, version.String("lightq"))
		return 0
	}
	if *printConfig {
		fmt.Fprint(stdout, defaultConf)
		return 0
	}
	if err := layerSettings(settings, *configFile, getenv, fs, flagVals); err != nil {
		fmt.Fprintln(stderr, "lightq:", err)
		return 2
	}

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
