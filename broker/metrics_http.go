package broker

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/lightq/lightq/broker/opshttp"
)

// This file ties the operations listener (package opshttp) to the broker's life: it listens
// from New on, before recovery, so that /healthz answers and /readyz says 503 while the logs
// are recovered; /metrics shows the broker's metrics once New has created them (the Go
// runtime's and the process's before); /readyz is 200 once Start has the listeners up, 503
// again from the start of Shutdown; the listener closes at the end of Shutdown.

// listenOps starts the operations listener when cfg.HTTPAddr is set, serving a registry that
// holds the Go runtime's and the process's collectors; the broker's join it in New (see
// newBrokerMetrics). It returns nils when HTTPAddr is empty.
func listenOps(cfg *Config) (*opshttp.Server, *prometheus.Registry, error) {
	if cfg.HTTPAddr == "" {
		return nil, nil, nil
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	log := cfg.Logger
	ops, err := opshttp.Listen(cfg.HTTPAddr, reg, opshttp.Options{
		Pprof:    cfg.HTTPPprof,
		ErrorLog: func(msg string, err error) { log.Warn().Err(err).Msg(msg) },
	})
	if err != nil {
		return nil, nil, err
	}
	log.Info().Str("http_addr", ops.Addr()).Bool("pprof", cfg.HTTPPprof).Msg("operations listener up: /metrics, /healthz, /readyz")
	return ops, reg, nil
}

// HTTPAddr is the address of the operations listener (with the real port when
// Config.HTTPAddr said 0), or "" when there is none. Safe for concurrent use.
func (s *Server) HTTPAddr() string {
	if s.ops == nil {
		return ""
	}
	return s.ops.Addr()
}

func (s *Server) setReady() {
	if s.ops != nil {
		s.ops.SetReady()
	}
}

func (s *Server) setNotReady() {
	if s.ops != nil {
		s.ops.SetNotReady(opshttp.ShuttingDown)
	}
}

// closeOps stops the operations listener, giving scrapes in progress a few seconds.
func (s *Server) closeOps() {
	if s.ops == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.ops.Close(ctx); err != nil {
		s.log.Warn().Err(err).Msg("closing the operations listener")
	}
}
