package lightq

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestRunOperationsListener: --http-addr serves /metrics, /healthz and /readyz; a
// --pprof-addr naming the same address is served by that listener (two listeners on one
// address could not both start).
func TestRunOperationsListener(t *testing.T) {
	r := startRun(t, []string{"--addr", "127.0.0.1:0", "--data-dir", t.TempDir(), "--hash-params", testHashParams,
		"--log-format", "json", "--http-addr", "127.0.0.1:0", "--pprof-addr", "127.0.0.1:0"}, nil)
	var httpAddr string
	for _, l := range logLines(r.stderr.String()) {
		if a, ok := l["http_addr"].(string); ok && l["pprof"] == true {
			httpAddr = a
		}
	}
	if httpAddr == "" {
		t.Fatalf("no operations listener serving pprof in the log:\n%s", r.stderr.String())
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	for path, want := range map[string]string{
		"/healthz":      "ok",
		"/readyz":       "ready",
		"/metrics":      "lightq_build_info{version=",
		"/debug/pprof/": "goroutine",
	} {
		resp, err := hc.Get("http://" + httpAddr + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
			t.Errorf("GET %s: %s, body %.200q, want it to contain %q", path, resp.Status, body, want)
		}
	}
}
