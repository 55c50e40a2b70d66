package lightq

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	_ "net/http/pprof"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/lightq/lightq/broker"
	"github.com/lightq/lightq/internal/version"
)

// commandFlags are the flags that act on the command itself rather than set a setting: the
// only flags a --config file does not take.
type commandFlags struct {
	configFile   *string
	printConfig  *bool
	printVersion *bool
}

// notSettings names the commandFlags, for the usage text and the test that walks every flag.
var notSettings = []string{"config", "print-config", "version"}

// newFlags returns the flag set of the lightq command: one flag per setting (boolSettings as
// boolean flags), whose values land in the returned map, and the commandFlags.
func newFlags(settings map[string]string, stderr io.Writer) (*flag.FlagSet, map[string]*string, commandFlags) {
	fs := flag.NewFlagSet("lightq", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: lightq [flags]\n\nThe LightQ message broker. Every flag but --%s can also be set\nby the environment variable LIGHTQ_<FLAG> (dashes become underscores) or in a --config\nfile. Sizes are bytes or take a unit: KB, MB, GB (powers of 1000) or KiB, MiB, GiB (powers\nof 1024), as in 64MiB.\n\nFlags:\n", strings.Join(notSettings, ", --"))
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
		v := settings[k]
		flagVals[k] = &v
		if boolSettings[k] {
			fs.Var((*boolSetting)(&v), k, confHelp[k])
		} else {
			fs.StringVar(&v, k, settings[k], confHelp[k])
		}
	}
	var cmd commandFlags
	cmd.configFile = fs.String("config", "", "read settings from this file (key = value lines, as --print-config shows)")
	cmd.printConfig = fs.Bool("print-config", false, "print the embedded default configuration and exit")
	cmd.printVersion = fs.Bool("version", false, "print the version (module, VCS revision and time, Go) and exit")
	return fs, flagVals, cmd
}

// boolSetting is a setting given as a boolean flag (--fetch-copy, or --fetch-copy=false) whose
// value is kept as the setting's text, "true" or "false", like every other setting.
type boolSetting string

func (b *boolSetting) String() string   { return string(*b) }
func (b *boolSetting) IsBoolFlag() bool { return true }
func (b *boolSetting) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*b = boolSetting(strconv.FormatBool(v))
	return nil
}

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
	fs, flagVals, cmd := newFlags(settings, stderr)
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
	if *cmd.printVersion {
		fmt.Fprintln(stdout, version.String("lightq"))
		return 0
	}
	if *cmd.printConfig {
		fmt.Fprint(stdout, defaultConf)
		return 0
	}
	if err := layerSettings(settings, *cmd.configFile, getenv, fs, flagVals); err != nil {
		fmt.Fprintln(stderr, "lightq:", err)
		return 2
	}

	cfg, err := buildConfig(settings, getenv, stderr)
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		fmt.Fprintln(stderr, "lightq:", err)
		return 2
	}
	if addr := settings["pprof-addr"]; addr != "" && !cfg.HTTPPprof { // else the operations listener serves it
		go func() {
			err := http.ListenAndServe(addr, nil)
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
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-hup:
			if settings["tls-addr"] == "" {
				cfg.Logger.Info().Msg("SIGHUP: nothing to reload (no TLS listener)")
				continue
			}
			cfg.Logger.Info().Msg("SIGHUP: reloading the TLS certificate, key and client CA")
			_ = srv.ReloadTLS() // logs the outcome; a failure keeps the current files
			continue
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
}
