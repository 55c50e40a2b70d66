package compare

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestScraper: the scraper GETs /metrics on its interval and counts good answers; a bad
// answer (an error status, or no lightq_ metrics) is its error.
func TestScraper(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		status     int
		wantErr    string
	}{
		{"good", "# HELP lightq_build_info x\nlightq_build_info{version=\"0.1.0\"} 1\n", 200, ""},
		{"status", "lightq_build_info 1\n", 503, "503"},
		{"not lightq", "go_goroutines 5\n", 200, "no lightq_ metrics"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hits := make(chan struct{}, 100)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
				select {
				case hits <- struct{}{}:
				default:
				}
			}))
			defer srv.Close()
			s := startScraper(context.Background(), srv.URL+"/metrics", time.Millisecond)
			for i := 0; i < 3; i++ {
				select {
				case <-hits:
				case <-time.After(20 * time.Second):
					t.Fatal("no scrape within 20 s")
				}
			}
			n, err := s.stop()
			switch {
			case tc.wantErr == "" && (err != nil || n < 2):
				t.Fatalf("%d scrapes, error %v", n, err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
			}
		})
	}
}
