// Package pace sleeps until a point in time precisely, for benchmark producers that send at
// a fixed rate (lqbench --rate, relaylat): each message is stamped with its scheduled time,
// so a late wake-up is measured as latency, and a spinning producer would take a core from
// the processes it measures.
//
// A Pacer belongs to one goroutine: New pins that goroutine to its OS thread (on Linux) and
// Close unpins it, so both must run on the goroutine that calls Sleep and Until.
//
//	p := pace.New()
//	defer p.Close()
//	for i := 0; i < n; i++ {
//		pace.Until(start.Add(time.Duration(i)*interval), p)
//		send(i)
//	}
package pace

import "time"

// Until returns at or after t, without spinning: it sleeps on a Go timer until about 1 ms
// before t (Go's timers wake up to a millisecond late), then finishes with p's precise sleep.
// It returns at once when t has passed. Not safe for concurrent use of one p.
func Until(t time.Time, p *Pacer) {
	for {
		d := time.Until(t)
		switch {
		case d <= 0:
			return
		case d > 2*time.Millisecond:
			time.Sleep(d - time.Millisecond)
		default:
			p.Sleep(d)
		}
	}
}
