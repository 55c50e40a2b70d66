// Package opshttp is the broker's operations listener: a small HTTP server, off unless the
// http-addr setting names an address, that serves
//
//	/metrics  the Prometheus text format (or OpenMetrics, as the scraper asks) of a Gatherer
//	/healthz  200 while the process answers at all
//	/readyz   200 once the broker has recovered its data and its listeners are up; 503 before,
//	          and again from the start of a shutdown
//	/debug/pprof/...  net/http/pprof, only when asked (the pprof-addr setting names the same
//	          address as http-addr)
//
// It knows nothing of the broker: the broker hands it a Gatherer and says when it is ready.
// The listener starts before the broker recovers its logs, so that a supervisor sees a live
// process that is not ready yet rather than a closed port.
//
// Concurrency: every method is safe for concurrent use. Scrapes are served on net/http's
// goroutines, at most maxScrapes at once; none runs on an event loop.
package opshttp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// maxScrapes bounds the /metrics requests served at once; more get 503 at once. One
// scrape walks every partition, so a flood of them must not multiply that work.
const maxScrapes = 4

// Options configure a Server.
type Options struct {
	// Pprof also serves net/http/pprof under /debug/pprof/ (no authentication: keep the
	// address on loopback).
	Pprof bool
	// ErrorLog receives the HTTP server's own errors (nil: discarded) and failed scrapes.
	ErrorLog func(msg string, err error)
}

// Server is a running operations listener.
type Server struct {
	srv   *http.Server
	ln    net.Listener
	done  chan struct{} // closed when Serve returns
	state atomic.Pointer[string]
}

// Not-ready reasons /readyz reports.
const (
	Starting     = "starting: recovering data and opening listeners"
	ShuttingDown = "shutting down"
)

// Listen listens on addr (host:port; port 0 picks one, see Addr) and serves g in the
// background. It is not ready (Starting) until SetReady.
func Listen(addr string, g prometheus.Gatherer, opts Options) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("http-addr: %w", err)
	}
	s := &Server{ln: ln, done: make(chan struct{})}
	s.SetNotReady(Starting)
	logf := opts.ErrorLog
	if logf == nil {
		logf = func(string, error) {}
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{
		ErrorLog:            errorLogger(logf),
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: maxScrapes,
		Timeout:             30 * time.Second,
		EnableOpenMetrics:   true,
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", s.serveReady)
	if opts.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	s.srv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      2 * time.Minute, // a pprof CPU profile runs 30 s by default
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    16 << 10,
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logf("operations listener stopped", err)
		}
	}()
	return s, nil
}

// Addr is the address the listener got (with the real port when asked for port 0).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// SetReady makes /readyz answer 200.
func (s *Server) SetReady() { s.state.Store(nil) }

// SetNotReady makes /readyz answer 503 with why.
func (s *Server) SetNotReady(why string) { s.state.Store(&why) }

func (s *Server) serveReady(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if why := s.state.Load(); why != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "not ready:", *why)
		return
	}
	fmt.Fprintln(w, "ready")
}

// Close stops the listener, giving requests in progress until ctx ends, then cutting them.
// Safe to call more than once, and on nil.
func (s *Server) Close(ctx context.Context) error {
	if s == nil {
		return nil
	}
	err := s.srv.Shutdown(ctx)
	if err != nil {
		err = s.srv.Close()
	}
	<-s.done
	return err
}

// errorLogger adapts logf to promhttp's Logger (a Println).
type errorLogger func(msg string, err error)

func (l errorLogger) Println(v ...any) { l("scrape failed", errors.New(fmt.Sprint(v...))) }
