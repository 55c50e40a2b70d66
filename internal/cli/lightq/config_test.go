package lightq

import (
	"bytes"
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
