//go:build !linux

package pace

import "time"

// Pacer falls back to Go's timers, which may wake up to a millisecond late.
type Pacer struct{}

// New returns a Pacer.
func New() *Pacer { return &Pacer{} }

// Sleep sleeps for d.
func (p *Pacer) Sleep(d time.Duration) { time.Sleep(d) }

// Close does nothing.
func (p *Pacer) Close() {}
