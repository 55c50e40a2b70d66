package compare

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// With -lightq-metrics INTERVAL, each lightq broker runs with its operations listener on
// (--http-addr) and a scraper GETs its /metrics every INTERVAL while the measurement runs, as
// Prometheus would (more often than its usual 15 s), so that the figures include what
// metrics cost: the broker's per-batch counting and the scrapes. A failed scrape fails the
// measurement.

// scraper GETs a /metrics URL at once and then every interval until stop.
type scraper struct {
	url      string
	interval time.Duration
	done     chan struct{}
	cancel   context.CancelFunc
	n        int   // scrapes answered 200 with a lightq_ series; read after stop
	err      error // the first failure; read after stop
}

func startScraper(ctx context.Context, url string, interval time.Duration) *scraper {
	ctx, cancel := context.WithCancel(ctx)
	s := &scraper{url: url, interval: interval, done: make(chan struct{}), cancel: cancel}
	go s.run(ctx)
	return s
}

func (s *scraper) run(ctx context.Context) {
	defer close(s.done)
	hc := &http.Client{Timeout: 10 * time.Second}
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for first := true; ; first = false {
		if !first {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		if err := scrapeOnce(ctx, hc, s.url); err != nil {
			if ctx.Err() == nil && s.err == nil {
				s.err = err
			}
			continue
		}
		s.n++
	}
}

// stop ends the scraping and returns how many scrapes succeeded, or the first failure.
func (s *scraper) stop() (int, error) {
	s.cancel()
	<-s.done
	return s.n, s.err
}

func scrapeOnce(ctx context.Context, hc *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	switch {
	case err != nil:
		return fmt.Errorf("scrape %s: %w", url, err)
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("scrape %s: %s", url, resp.Status)
	case !strings.Contains(string(body), "lightq_build_info"):
		return fmt.Errorf("scrape %s: no lightq_ metrics in %d bytes", url, len(body))
	}
	return nil
}
