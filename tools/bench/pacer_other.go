//go:build !linux

package bench

import "time"

// pacer falls back to Go's timers, which may wake up to a millisecond late.
type pacer struct{}

func newPacer() *pacer                 { return &pacer{} }
func (p *pacer) sleep(d time.Duration) { time.Sleep(d) }
func (p *pacer) close()                {}
