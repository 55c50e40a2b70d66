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
