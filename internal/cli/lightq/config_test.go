package lightq

import (
	"bytes"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestConnectionLimitSettings: the connection limits go from settings to the broker's Config,
// and bad values name their setting.
func TestConnectionLimitSettings(t *testing.T) {
	settings, err := parseConf(defaultConf, "default.conf")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := buildConfig(settings, envFunc(nil), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ReadTimeout != 30*time.Second || cfg.IdleTimeout != 10*time.Minute || cfg.MaxConnections != 10000 || cfg.MaxConnectionsPerAddr != 1000 {
		t.Errorf("defaults: read %v, idle %v, connections %d, per address %d", cfg.ReadTimeout, cfg.IdleTimeout, cfg.MaxConnections, cfg.MaxConnectionsPerAddr)
	}
	settings["read-timeout"], settings["idle-timeout"] = "5s", "0s"
	settings["max-connections"], settings["max-connections-per-addr"] = "50", "7"
	if cfg, err = buildConfig(settings, envFunc(nil), &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if cfg.ReadTimeout != 5*time.Second || cfg.IdleTimeout != 0 || cfg.MaxConnections != 50 || cfg.MaxConnectionsPerAddr != 7 {
		t.Errorf("set: read %v, idle %v, connections %d, per address %d", cfg.ReadTimeout, cfg.IdleTimeout, cfg.MaxConnections, cfg.MaxConnectionsPerAddr)
	}
	for key, bad := range map[string]string{"read-timeout": "soon", "idle-timeout": "10", "max-connections": "many", "max-connections-per-addr": "1k"} {
		s := map[string]string{}
		for k, v := range settings {
			s[k] = v
		}
		s[key] = bad
		if _, err := buildConfig(s, envFunc(nil), &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s = %s: error %v does not name the setting", key, bad, err)
		}
	}
}

// TestSizeSettings: every size setting takes plain bytes or a unit (KB, MiB, ...), and a bad
// size names its setting and the units.
func TestSizeSettings(t *testing.T) {
	settings, err := parseConf(defaultConf, "default.conf")
	if err != nil {
		t.Fatal(err)
	}
	settings["max-batch"], settings["max-message"] = "2MiB", "1MB"
	settings["read-buffer"], settings["high-water-mark"] = "512KiB", "8MiB"
	settings["ring-bytes"], settings["max-ring-memory"] = "64MiB", "8GiB"
	cfg, err := buildConfig(settings, envFunc(nil), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Limits.MaxBatch != 2<<20 || cfg.Limits.MaxMessage != 1e6 || cfg.ReadBufferCap != 512<<10 || cfg.HighWaterMark != 8<<20 || cfg.RingBytes != 64<<20 || cfg.MaxRingMemory != 8<<30 {
		t.Errorf("batch %d, message %d, read %d, hwm %d, ring %d, ring memory %d", cfg.Limits.MaxBatch, cfg.Limits.MaxMessage, cfg.ReadBufferCap, cfg.HighWaterMark, cfg.RingBytes, cfg.MaxRingMemory)
	}
	for _, key := range []string{"max-batch", "max-message", "read-buffer", "high-water-mark", "ring-bytes", "max-ring-memory"} {
		s := map[string]string{}
		for k, v := range settings {
			s[k] = v
		}
		s[key] = "64 MiB"
		if _, err := buildConfig(s, envFunc(nil), &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), key+":") || !strings.Contains(err.Error(), "MiB") {
			t.Errorf("%s = 64 MiB: error %v does not name the setting and the units", key, err)
		}
	}
}

// settingSamples is a valid value, other than the default, for every setting: the test below
// fails for a new flag until it has one here.
var settingSamples = map[string]string{
	"addr": "127.0.0.1:7451", "data-dir": "/tmp/elsewhere", "log-level": "debug", "log-format": "console",
	"admin-user": "root", "max-batch": "2MiB", "max-message": "1MB", "auth-timeout": "3s",
	"event-loops": "3", "read-buffer": "128KiB", "high-water-mark": "8MiB", "ring-bytes": "16MiB",
	"ring-slots": "2048", "max-ring-memory": "1GiB", "hash-params": "m=32768,t=3,p=2",
	"shutdown-drain": "5s", "transfer-timeout": "2m", "read-timeout": "20s", "idle-timeout": "5m",
	"max-connections": "500", "max-connections-per-addr": "50",
	"producer-expiry": "1h", "max-producers-per-partition": "100", "max-producers": "1000",
	"group-session-timeout": "20s", "group-min-session-timeout": "2s", "group-max-session-timeout": "10m",
	"max-members-per-group": "64", "max-groups": "500", "max-group-members": "2000",
	"pprof-addr": "127.0.0.1:6061", "fetch-copy": "true",
	"http-addr": "127.0.0.1:9470", "metrics-max-groups": "50",
	"tls-addr": "0.0.0.0:7451", "tls-cert": "/etc/lightq/server.crt", "tls-key": "/etc/lightq/server.key",
	"tls-client-ca": "/etc/lightq/clients.crt", "tls-client-auth": "optional", "tls-min-version": "1.2",
	"tls-handshake-timeout": "3s",
	"node-id":               "2", "cluster-peers": "1=127.0.0.1:7460,2=127.0.0.1:7461", "cluster-listen": "0.0.0.0:7461",
	"cluster-secret-file": "testdata/cluster.secret", "advertise-addr": "10.0.0.2:7450", "advertise-tls-addr": "10.0.0.2:7451",
	"cluster-join":               "true",
	"cluster-offsets-partitions": "16",
	"cluster-scrub-rate":         "1MiB",
}

// TestOperationsSettings: http-addr and metrics-max-groups reach the broker's Config; the
// operations listener serves pprof only when pprof-addr names the same address; bad values
// name their setting.
func TestOperationsSettings(t *testing.T) {
	settings, err := parseConf(defaultConf, "default.conf")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := buildConfig(settings, envFunc(nil), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HTTPAddr != "" || cfg.HTTPPprof || cfg.MetricsMaxGroups != 1000 {
		t.Errorf("defaults: http-addr %q, pprof there %v, max groups %d", cfg.HTTPAddr, cfg.HTTPPprof, cfg.MetricsMaxGroups)
	}
	for _, tc := range []struct {
		http, pprof string
		shared      bool
	}{
		{"127.0.0.1:9470", "", false},
		{"127.0.0.1:9470", "127.0.0.1:6060", false},
		{"127.0.0.1:9470", "127.0.0.1:9470", true},
		{"", "127.0.0.1:6060", false},
	} {
		settings["http-addr"], settings["pprof-addr"] = tc.http, tc.pprof
		cfg, err := buildConfig(settings, envFunc(nil), &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		if cfg.HTTPAddr != tc.http || cfg.HTTPPprof != tc.shared {
			t.Errorf("http-addr %q, pprof-addr %q: HTTPAddr %q, HTTPPprof %v", tc.http, tc.pprof, cfg.HTTPAddr, cfg.HTTPPprof)
		}
	}
	for key, bad := range map[string]string{"http-addr": "9470", "metrics-max-groups": "lots"} {
		s := map[string]string{}
		for k, v := range settings {
			s[k] = v
		}
		s[key] = bad
		if _, err := buildConfig(s, envFunc(nil), &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s = %s: error %v does not name the setting", key, bad, err)
		}
	}
}

// TestEveryFlagInConfigFile walks every flag of the lightq command: each but the command's own
// (--config, --print-config, --version) is accepted in a --config file and changes the
// configuration the broker gets (or, for pprof-addr, the setting Main serves pprof on).
func TestEveryFlagInConfigFile(t *testing.T) {
	defaults, err := parseConf(defaultConf, "default.conf")
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	build := func(configFile string) (map[string]string, string) {
		t.Helper()
		settings, _ := parseConf(defaultConf, "default.conf")
		fs, flagVals, _ := newFlags(settings, &stderr)
		if err := fs.Parse(nil); err != nil {
			t.Fatal(err)
		}
		if err := layerSettings(settings, configFile, envFunc(nil), fs, flagVals); err != nil {
			t.Fatalf("%s: %v", configFile, err)
		}
		cfg, err := buildConfig(settings, envFunc(nil), &stderr)
		if err != nil {
			t.Fatalf("%s: %v", configFile, err)
		}
		return settings, fmt.Sprintf("%+v", cfg)
	}
	_, base := build("")
	if _, again := build(""); again != base {
		t.Fatal("two builds of the defaults differ: the comparison below would prove nothing")
	}
	fs, _, _ := newFlags(map[string]string{}, &stderr)
	var commandOnly []string
	fs.VisitAll(func(f *flag.Flag) { commandOnly = append(commandOnly, f.Name) })
	if !slices.Equal(commandOnly, notSettings) {
		t.Errorf("without settings the command has flags %v, want only %v", commandOnly, notSettings)
	}
	all, _, _ := newFlags(defaults, &stderr)
	dir := t.TempDir()
	all.VisitAll(func(f *flag.Flag) {
		if slices.Contains(notSettings, f.Name) {
			return
		}
		sample, ok := settingSamples[f.Name]
		if !ok {
			t.Errorf("flag --%s: no sample value in settingSamples", f.Name)
			return
		}
		if sample == defaults[f.Name] {
			t.Errorf("flag --%s: the sample is the default", f.Name)
		}
		file := filepath.Join(dir, f.Name+".conf")
		if err := os.WriteFile(file, []byte(f.Name+" = "+sample+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		settings, got := build(file)
		if settings[f.Name] != sample {
			t.Errorf("%s = %s in a file: the setting is %q", f.Name, sample, settings[f.Name])
		}
		if f.Name != "pprof-addr" && got == base {
			t.Errorf("%s = %s in a file: the broker's configuration did not change", f.Name, sample)
		}
	})
}

// TestClusterSettings: the cluster settings reach the broker's Config, the secret from the
// environment before the file, and bad values name their setting.
func TestClusterSettings(t *testing.T) {
	settings, err := parseConf(defaultConf, "default.conf")
	if err != nil {
		t.Fatal(err)
	}
	settings["node-id"] = "2"
	settings["cluster-peers"] = "1=127.0.0.1:7460, 2=127.0.0.1:7461,3=[::1]:7462"
	settings["cluster-secret-file"] = "testdata/cluster.secret"
	cfg, err := buildConfig(settings, envFunc(nil), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NodeID != 2 || len(cfg.Cluster.Peers) != 3 || cfg.Cluster.Peers[3] != "[::1]:7462" || string(cfg.Cluster.Secret) != "a-test-cluster-secret-0123456789" {
		t.Errorf("node %d peers %v secret %q", cfg.NodeID, cfg.Cluster.Peers, cfg.Cluster.Secret)
	}
	cfg, err = buildConfig(settings, envFunc(map[string]string{"LIGHTQ_CLUSTER_SECRET": "from-the-environment-16"}), &bytes.Buffer{})
	if err != nil || string(cfg.Cluster.Secret) != "from-the-environment-16" {
		t.Errorf("secret from the environment: %q, %v", cfg.Cluster.Secret, err)
	}
	for _, tc := range []struct{ key, value, want string }{
		{"node-id", "0", "node-id: \"0\" is out of range"},
		{"cluster-peers", "1=127.0.0.1:7460,1=127.0.0.1:7461", "cluster-peers: node 1 is listed twice"},
		{"cluster-peers", "x=127.0.0.1:7460", "the node id must be an integer"},
		{"cluster-peers", "1=localhost", "cluster-peers: node 1: \"localhost\" is not host:port"},
		{"cluster-secret-file", "testdata/no-such-file", "cluster-secret-file: open testdata/no-such-file"},
	} {
		bad := maps.Clone(settings)
		bad[tc.key] = tc.value
		if _, err := buildConfig(bad, envFunc(nil), &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s = %s: %v, want %q", tc.key, tc.value, err, tc.want)
		}
	}
}
