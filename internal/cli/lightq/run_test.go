package lightq

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lightq/lightq/broker/brokertest"
	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/internal/version"
	"github.com/lightq/lightq/wire"
)

// testHashParams keeps argon2id cheap in tests.
const testHashParams = "m=64,t=1,p=1"

// syncBuffer is a bytes.Buffer safe for the broker's logger and the test at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// logLines decodes the JSON log lines written so far; other lines are skipped.
func logLines(text string) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// logHas reports whether a JSON log line has message msg.
func logHas(text, msg string) bool {
	for _, l := range logLines(text) {
		if l["message"] == msg {
			return true
		}
	}
	return false
}

// takenAddr returns a loopback address that a listener of the test holds until it ends: a
// broker told to listen there cannot start.
func takenAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

func envFunc(env map[string]string) func(string) string {
	return func(k string) string { return env[k] }
}

// runDirect calls run with a context that ends after 10 s, so that a run expected to fail
// fast cannot hang the test if it starts a broker after all. Every call gets a port of its
// own (port 0) and a private data directory for the same reason.
func runDirect(t *testing.T, args []string, env map[string]string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	safe := []string{"--addr", "127.0.0.1:0", "--data-dir", t.TempDir(), "--hash-params", testHashParams}
	var out, errb syncBuffer
	code = Main(ctx, append(safe, args...), envFunc(env), &out, &errb)
	return code, out.String(), errb.String()
}

// running is a broker started by run in a goroutine.
type running struct {
	addr   string // where it listens, from its "lightq listening" log line
	cancel context.CancelFunc
	done   chan int
	stderr *syncBuffer
}

// startRun starts run and waits until it logs where it listens. args should say --addr
// 127.0.0.1:0 (or leave the address to a config file or the environment that does): the
// broker picks a free port itself, which no other process can take first.
func startRun(t *testing.T, args []string, env map[string]string) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan int, 1), stderr: &syncBuffer{}}
	go func() { r.done <- Main(ctx, args, envFunc(env), &bytes.Buffer{}, r.stderr) }()
	t.Cleanup(func() { r.stop(t) })
	deadline := time.Now().Add(30 * time.Second)
	for {
		if addr, ok := brokertest.ListenAddr(r.stderr.String()); ok {
			r.addr = addr
			return r
		}
		select {
		case code := <-r.done:
			r.done <- code
			t.Fatalf("run returned %d before listening; log:\n%s", code, r.stderr.String())
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("run logged no listening address after 30 s; log:\n%s", r.stderr.String())
		}
	}
}

// stop cancels run's context and checks it returns 0 within 10 s. Idempotent.
func (r *running) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case code := <-r.done:
		r.done <- code
		if code != 0 {
			t.Errorf("run returned %d after cancel, want 0; log:\n%s", code, r.stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("run did not return 10 s after cancel; log:\n%s", r.stderr.String())
	}
}

func dialAdmin(t *testing.T, addr, password string) (*client.Conn, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, addr, client.Options{User: "admin", Password: password, ClientName: t.Name()})
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

func TestRunHelp(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"--help", "-h"} {
		code, stdout, stderr := runDirect(t, []string{arg}, nil)
		if code != 0 {
			t.Errorf("%s: exit %d, want 0", arg, code)
		}
		for _, want := range []string{"Usage: lightq", "-addr", "-ring-bytes", "-config", "-print-config", "LIGHTQ_ADMIN_PASSWORD"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("%s: usage lacks %q:\n%s", arg, want, stderr)
			}
		}
		if stdout != "" {
			t.Errorf("%s: wrote %q to stdout", arg, stdout)
		}
	}
}

func TestRunPrintConfig(t *testing.T) {
	t.Parallel()
	code, stdout, _ := runDirect(t, []string{"--print-config"}, nil)
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	if stdout != defaultConf {
		t.Errorf("--print-config printed\n%s\nwant the embedded default.conf\n%s", stdout, defaultConf)
	}
	file, err := os.ReadFile("default.conf")
	if err != nil {
		t.Fatal(err)
	}
	if stdout != string(file) {
		t.Error("--print-config differs from default.conf on disk")
	}
	// Every default setting is documented as a flag, and the defaults parse.
	settings, err := parseConf(stdout, "printed")
	if err != nil {
		t.Fatal(err)
	}
	for k := range settings {
		if confHelp[k] == "" {
			t.Errorf("setting %q has no flag help", k)
		}
	}
	for k := range confHelp {
		if _, ok := settings[k]; !ok {
			t.Errorf("flag help for %q, which default.conf lacks", k)
		}
	}
	if _, err := buildConfig(settings, envFunc(nil), &bytes.Buffer{}); err != nil {
		t.Errorf("the embedded defaults do not build a config: %v", err)
	}
}

func TestRunBadUsage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	unknownKey := filepath.Join(dir, "unknown.conf")
	malformed := filepath.Join(dir, "malformed.conf")
	badValue := filepath.Join(dir, "badvalue.conf")
	for path, text := range map[string]string{
		unknownKey: "colour = blue\n",
		malformed:  "# comment\naddr 127.0.0.1:1\n",
		badValue:   "ring-slots = lots\n",
	} {
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name string
		args []string
		env  map[string]string
		want string // the stderr must mention it
	}{
		{"unknown flag", []string{"--no-such-flag"}, nil, "no-such-flag"},
		{"argument", []string{"extra"}, nil, `unexpected argument "extra"`},
		{"max-batch", []string{"--max-batch=abc"}, nil, "max-batch"},
		{"log-level", []string{"--log-level=loud"}, nil, "log-level"},
		{"hash-params", []string{"--hash-params=m=1"}, nil, "hash-params"},
		{"hash-params key", []string{"--hash-params=m=64,t=1,q=1"}, nil, "hash-params"},
		{"hash-params weak", []string{"--hash-params=m=1,t=1,p=1"}, nil, "memory"},
		{"log-format", []string{"--log-format=xml"}, nil, "log-format"},
		{"duration", []string{"--shutdown-drain=soon"}, nil, "shutdown-drain"},
		{"env value", nil, map[string]string{"LIGHTQ_READ_BUFFER": "big"}, "read-buffer"},
		{"config unknown key", []string{"--config", unknownKey}, nil, "colour"},
		{"config malformed", []string{"--config", malformed}, nil, "malformed.conf:2"},
		{"config value", []string{"--config", badValue}, nil, "ring-slots"},
		{"config missing", []string{"--config", filepath.Join(dir, "missing.conf")}, nil, "missing.conf"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runDirect(t, tc.args, tc.env)
			if code != 2 {
				t.Fatalf("exit %d, want 2; stderr:\n%s", code, stderr)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("stderr does not mention %q:\n%s", tc.want, stderr)
			}
		})
	}
	t.Run("hash-params weak names the setting", func(t *testing.T) {
		code, _, stderr := runDirect(t, []string{"--hash-params=m=1,t=1,p=1"}, nil)
		if code != 2 {
			t.Fatalf("exit %d, want 2", code)
		}
		if !strings.Contains(stderr, "hash-params") {
			t.Fatalf("the error does not name the setting: %q", stderr)
		}
	})
}

// TestRunOutOfRangeValue: a value that parses but the broker refuses (max-batch below 4096)
// is bad usage too.
func TestRunOutOfRangeValue(t *testing.T) {
	t.Parallel()
	code, _, stderr := runDirect(t, []string{"--max-batch=100", "--log-format=json"}, nil)
	if code == 0 {
		t.Fatalf("exit 0 with max-batch=100; log:\n%s", stderr)
	}
	if !strings.Contains(stderr, "max batch 100") {
		t.Errorf("the error does not name the value:\n%s", stderr)
	}
	if code != 2 {
		t.Fatalf("exit %d, want 2 (bad usage)", code)
	}
}

// TestRunListenFailure: a broker that cannot listen exits 1.
func TestRunListenFailure(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var stderr syncBuffer
	code := Main(ctx, []string{"--addr", ln.Addr().String(), "--data-dir", t.TempDir(), "--hash-params", testHashParams, "--log-format", "json"},
		envFunc(map[string]string{"LIGHTQ_ADMIN_PASSWORD": "pw-for-listen-failure"}), &bytes.Buffer{}, &stderr)
	if code != 1 {
		t.Errorf("exit %d with the address taken, want 1; log:\n%s", code, stderr.String())
	}
	if !logHas(stderr.String(), "cannot start") {
		t.Errorf("log lacks \"cannot start\":\n%s", stderr.String())
	}
}

// TestRunPrecedence: defaults < config file < environment < flags, checked on a broker that
// listens where the winning layer says and announces the winning limits. The winning layer
// says 127.0.0.1:0; the layers that must lose name addresses the test holds, where the broker
// cannot listen, so it starts only if the right layer won.
func TestRunPrecedence(t *testing.T) {
	t.Parallel()
	const adminPass = "precedence-admin-pw"
	dir := t.TempDir()
	const freeAddr = "127.0.0.1:0"
	takenFileAddr, takenEnvAddr := takenAddr(t), takenAddr(t)
	fileDir, envDir, flagDir := filepath.Join(dir, "file"), filepath.Join(dir, "env"), filepath.Join(dir, "flag")
	writeConf := func(name, addr string) string {
		path := filepath.Join(dir, name)
		text := fmt.Sprintf("# test\naddr = %s\ndata-dir = %s\nmax-message = 1000\nhash-params = %s\nshutdown-drain = 100ms\nlog-level = debug\n",
			addr, fileDir, testHashParams)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	conf := writeConf("lightq.conf", freeAddr)            // the file wins
	losingConf := writeConf("losing.conf", takenFileAddr) // the file loses
	baseEnv := map[string]string{"LIGHTQ_ADMIN_PASSWORD": adminPass}
	env := func(addr string) map[string]string {
		return map[string]string{
			"LIGHTQ_ADMIN_PASSWORD": adminPass,
			"LIGHTQ_ADDR":           addr,
			"LIGHTQ_DATA_DIR":       envDir,
			"LIGHTQ_MAX_MESSAGE":    "2000",
			"LIGHTQ_LOG_LEVEL":      "info",
		}
	}
	cases := []struct {
		name       string
		args       []string
		env        map[string]string
		data       string
		maxMessage int
		debugLog   bool
	}{
		{"file", []string{"--config", conf}, baseEnv, fileDir, 1000, true},
		{"env over file", []string{"--config", losingConf}, env(freeAddr), envDir, 2000, false},
		{"flag over env", []string{"--config", losingConf, "--addr", freeAddr, "--data-dir", flagDir, "--max-message=3000"}, env(takenEnvAddr), flagDir, 3000, false},
	}
	for _, tc := range cases {
		r := startRun(t, tc.args, tc.env)
		c, err := dialAdmin(t, r.addr, adminPass)
		if err != nil {
			t.Fatalf("%s: dial %s: %v", tc.name, r.addr, err)
		}
		if got := c.Limits().MaxMessage; got != tc.maxMessage {
			t.Errorf("%s: max message %d, want %d", tc.name, got, tc.maxMessage)
		}
		c.Close()
		if _, err := os.Stat(filepath.Join(tc.data, "meta.json")); err != nil {
			t.Errorf("%s: data dir %s not used: %v", tc.name, tc.data, err)
		}
		r.stop(t)
		log := r.stderr.String()
		var listening map[string]any
		debug := false
		for _, l := range logLines(log) {
			if l["message"] == "lightq listening" {
				listening = l
			}
			if l["level"] == "debug" {
				debug = true
			}
		}
		if listening == nil || listening["data_dir"] != tc.data {
			t.Errorf("%s: listening log line %v, want data_dir %s", tc.name, listening, tc.data)
		}
		if debug != tc.debugLog {
			t.Errorf("%s: debug lines logged: %v, want %v (log-level from the file, overridden by env)", tc.name, debug, tc.debugLog)
		}
		if !logHas(log, "stopped") {
			t.Errorf("%s: log lacks \"stopped\":\n%s", tc.name, log)
		}
	}
}

// TestRunAdminPasswordFromEnv: LIGHTQ_ADMIN_PASSWORD is the admin password; nothing is
// generated and the password is not logged.
func TestRunAdminPasswordFromEnv(t *testing.T) {
	t.Parallel()
	const pass = "env-admin-password-7f3a"
	dataDir := t.TempDir()
	r := startRun(t, []string{"--addr", "127.0.0.1:0", "--data-dir", dataDir, "--hash-params", testHashParams, "--shutdown-drain", "100ms"},
		map[string]string{"LIGHTQ_ADMIN_PASSWORD": pass})
	c, err := dialAdmin(t, r.addr, pass)
	if err != nil {
		t.Fatalf("dial with LIGHTQ_ADMIN_PASSWORD: %v", err)
	}
	if c.Role() != wire.RoleAdmin {
		t.Errorf("role %v", c.Role())
	}
	if _, err := dialAdmin(t, r.addr, pass+"x"); !errors.Is(err, &wire.Error{Code: wire.CodeAuthFailed}) {
		t.Errorf("wrong admin password: %v, want AUTH_FAILED", err)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "admin-password")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("admin-password file with a configured password: %v", err)
	}
	r.stop(t)
	if strings.Contains(r.stderr.String(), pass) {
		t.Error("the log contains the admin password")
	}
}

// TestRunGeneratedAdminPassword: without LIGHTQ_ADMIN_PASSWORD the broker writes one to
// <data-dir>/admin-password (0600), it works, it is not logged, and a restart keeps it.
func TestRunGeneratedAdminPassword(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	args := []string{"--addr", "127.0.0.1:0", "--data-dir", dataDir, "--hash-params", testHashParams, "--shutdown-drain", "100ms"}
	r := startRun(t, args, nil)
	path := filepath.Join(dataDir, "admin-password")
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatalf("no generated password file: %v", err)
	}
	if mode := fi.Mode().Perm(); mode != 0o600 {
		t.Errorf("admin-password mode %o, want 600", mode)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pass := strings.TrimSpace(string(data))
	if len(pass) < 16 {
		t.Errorf("generated password %d characters long", len(pass))
	}
	if _, err := dialAdmin(t, r.addr, pass); err != nil {
		t.Fatalf("dial with the generated password: %v", err)
	}
	r.stop(t)
	log := r.stderr.String()
	if strings.Contains(log, pass) {
		t.Error("the log contains the generated admin password")
	}
	if !strings.Contains(log, path) {
		t.Errorf("the log does not say where the password is:\n%s", log)
	}

	// A restart without LIGHTQ_ADMIN_PASSWORD keeps the stored admin.
	r2 := startRun(t, args, nil)
	if data2, err := os.ReadFile(path); err != nil || !bytes.Equal(data, data2) {
		t.Errorf("password file changed on restart: %v", err)
	}
	if _, err := dialAdmin(t, r2.addr, pass); err != nil {
		t.Errorf("dial after restart: %v", err)
	}
	r2.stop(t)
}

// TestRunVersion: --version prints the build's version line on stdout and exits 0 without
// starting a broker.
func TestRunVersion(t *testing.T) {
	t.Parallel()
	code, stdout, _ := runDirect(t, []string{"--version"}, nil)
	if code != 0 || stdout != version.String("lightq")+"\n" || !strings.Contains(stdout, runtime.Version()) {
		t.Errorf("--version: exit %d, printed %q", code, stdout)
	}
}
