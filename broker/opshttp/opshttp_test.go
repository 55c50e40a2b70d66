package opshttp

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var client = &http.Client{Timeout: 10 * time.Second}

func get(t *testing.T, s *Server, method, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+s.Addr()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func listen(t *testing.T, reg *prometheus.Registry, opts Options) *Server {
	t.Helper()
	s, err := Listen("127.0.0.1:0", reg, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// TestEndpoints: /healthz always 200; /readyz 503 with the reason until SetReady, 200 after,
// 503 again when told; /metrics is the gatherer's text; pprof only when asked; nothing else.
func TestEndpoints(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "test_things_total", Help: "Things."})
	reg.MustRegister(c)
	c.Add(3)
	s := listen(t, reg, Options{})

	type want struct {
		method, path string
		code         int
		body         string
	}
	check := func(when string, ws ...want) {
		t.Helper()
		for _, w := range ws {
			code, body := get(t, s, w.method, w.path)
			if code != w.code || !strings.Contains(body, w.body) {
				t.Errorf("%s: %s %s = %d %q, want %d containing %q", when, w.method, w.path, code, body, w.code, w.body)
			}
		}
	}
	check("at start",
		want{"GET", "/healthz", 200, "ok"},
		want{"HEAD", "/healthz", 200, ""},
		want{"GET", "/readyz", 503, "not ready: " + Starting},
		want{"GET", "/metrics", 200, "# HELP test_things_total Things.\n# TYPE test_things_total counter\ntest_things_total 3\n"},
		want{"POST", "/metrics", 405, ""},
		want{"GET", "/debug/pprof/", 404, ""},
		want{"GET", "/", 404, ""},
	)
	s.SetReady()
	check("ready", want{"GET", "/readyz", 200, "ready"}, want{"GET", "/healthz", 200, "ok"})
	s.SetNotReady(ShuttingDown)
	check("shutting down", want{"GET", "/readyz", 503, "not ready: shutting down"})

	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if resp, err := client.Get("http://" + s.Addr() + "/healthz"); err == nil {
		resp.Body.Close()
		t.Fatal("served after Close")
	}
	var none *Server
	if err := none.Close(context.Background()); err != nil {
		t.Fatalf("Close on nil: %v", err)
	}
}

// TestPprof: with Options.Pprof the listener serves net/http/pprof.
func TestPprof(t *testing.T) {
	s := listen(t, prometheus.NewRegistry(), Options{Pprof: true})
	if code, body := get(t, s, "GET", "/debug/pprof/"); code != 200 || !strings.Contains(body, "goroutine") {
		t.Fatalf("/debug/pprof/: %d %.100q", code, body)
	}
	if code, _ := get(t, s, "GET", "/debug/pprof/goroutine?debug=1"); code != 200 {
		t.Fatalf("/debug/pprof/goroutine: %d", code)
	}
}

// TestListenErrors: a bad or taken address fails, naming the setting.
func TestListenErrors(t *testing.T) {
	taken := listen(t, prometheus.NewRegistry(), Options{})
	for _, addr := range []string{"no-port", taken.Addr()} {
		if s, err := Listen(addr, prometheus.NewRegistry(), Options{}); err == nil || !strings.Contains(err.Error(), "http-addr") {
			if s != nil {
				_ = s.Close(context.Background())
			}
			t.Errorf("Listen(%q): %v", addr, err)
		}
	}
}
