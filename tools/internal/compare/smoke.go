package compare

import "time"

// smoke shrinks cfg to a run of every case in seconds, for `go run ./tools/compare -smoke`
// (make compare-smoke) and TestSmoke: one round, tiny counts, no wait for an idle CPU. Its
// figures mean nothing; it shows that every case runs end to end and fills its rows.
func smoke(cfg Config) Config {
	cfg.Rounds = 1
	cfg.QuietIdle = 0
	cfg.RunTimeout = 60 * time.Second
	// 100 MB at 1 KiB and 512 MiB of raw TCP: enough CPU in each process (tens of ms) for
	// the 10 ms ticks of the CPU-per-GB figures.
	cfg.Msgs100, cfg.Msgs1K, cfg.FanoutMsgs, cfg.FanoutSubs = 3000, 100_000, 1000, 2
	cfg.SustainBytes, cfg.SustainTime, cfg.SustainTimeout = 4e6, 300*time.Millisecond, 60*time.Second
	// Enough for every broker of a replicated case to use some CPU within the producer's
	// interval (its CPU-per-GB rows), a few hundred ms.
	cfg.ReplBytes = 40e6
	cfg.LatencyRate, cfg.LatencyDuration = 2000, time.Second
	cfg.TCPBytes = 512 << 20
	cfg.PlotSizes, cfg.PlotBytes = []int{16, 4096}, 1 // 10,000 messages each (the minimum)
	return cfg
}
