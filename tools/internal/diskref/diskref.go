// Package diskref is the diskref command (tools/diskref is its main): the disk reference of
// `make compare`'s durable cases. It writes to the disk the way a LightQ durable partition
// does, with nothing else in the way (no network, no broker, no checks), so that a durable
// figure can be read as a share of what the disk gave in the same minutes.
//
//	diskref -dir DIR [-bytes 2GB] [-write 512KiB] [-segment 64MiB] [-sync always|interval=2m|never]
//	        [-inflight 16] [-call fdatasync|fsync] [-timeout 3m] [-json]
//
// What it does, after log/log.go, log/index.go and broker/durable.go:
//
//   - One positioned write(2) per producer batch of -write bytes (lqbench's batch, 512 KiB),
//     appended to segment files of -segment bytes (the broker's 64 MiB).
//   - At each segment roll, on the writer as Log.roll does: sync the full segment, write its
//     two index files (one 8-byte and one 12-byte entry per batch, as a 512 KiB batch gets:
//     temp file, sync, rename), create the next segment, fsync the directory, and write and
//     sync the 40-byte checkpoint.
//   - -sync always (fsync=always, or acks=durable): a syncer goroutine syncs the active
//     segment whenever something was written since its last sync (group commit: one sync
//     covers every batch written before it began), plus the checkpoint at most once a
//     second; the writer keeps at most -inflight batches written but not yet synced, as a
//     producer with that many batches in flight waits for their acks.
//   - -sync interval=D: a sync every D (none within a run shorter than D) besides the rolls;
//     batches count as done once written. -sync never: only the rolls' syncs.
//
// The segment data is synced with fdatasync (-call fsync to use fsync, which the broker's
// os.File.Sync calls: on an appending write both must commit the new file size, so they cost
// the same up to the timestamps). The rate is bytes / (first write .. last batch done: synced
// with always, written otherwise), as a producer measures first send .. last ack. Every file
// it makes is removed at the end; it refuses to start when the disk has less than -bytes
// plus 64 MiB free.
//
// Output: one line of key=value pairs, or with -json one JSON object {"bytes","seconds",
// "mb_per_sec","syncs","sync_mean_ms","sync_max_ms","rolls","cpu_s",...}.
package diskref

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/lightq/lightq/internal/size"
	"github.com/lightq/lightq/tools/internal/diskfree"
)

// policy is when the segment data is synced besides rolls.
type policy int

const (
	syncAlways   policy = iota // group commit, writer bounded by inflight
	syncInterval               // every interval
	syncNever                  // only at rolls
)

// config is one run.
type config struct {
	dir      string
	total    int64
	write    int
	segment  int64
	policy   policy
	interval time.Duration
	inflight int
	fsync    bool // fsync instead of fdatasync for the segment data
	// checkpointEvery bounds the checkpoint writes of the always policy (Log.Sync's
	// CheckpointInterval, 1 s by default).
	checkpointEvery time.Duration
}

// result is what one run measured. Field names double as the -json keys.
type result struct {
	Bytes        int64   `json:"bytes"`
	Seconds      float64 `json:"seconds"`
	MBPerSec     float64 `json:"mb_per_sec"` // 1e6 bytes per second
	Sync         string  `json:"sync"`
	Call         string  `json:"call"`
	WriteSize    int     `json:"write_size"`
	SegmentBytes int64   `json:"segment_bytes"`
	Inflight     int     `json:"inflight,omitempty"`
	Writes       int64   `json:"writes"`
	Syncs        int64   `json:"syncs"`       // syncs of segment data: group commits, interval ticks, rolls
	SmallSyncs   int64   `json:"small_syncs"` // of index files, checkpoint and directory
	SyncMeanMs   float64 `json:"sync_mean_ms"`
	SyncMaxMs    float64 `json:"sync_max_ms"`
	Rolls        int     `json:"rolls"`
	CPU          float64 `json:"cpu_s"` // this process, over the measured interval
}

// Main is the whole of the diskref command: it parses args (without the program name) and
// returns the exit code: 0 done (or -h), 1 the run failed, 2 bad usage.
func Main(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("diskref", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := config{write: 512 << 10, segment: 64 << 20, inflight: 16, checkpointEvery: time.Second}
	total, write, segment := size.Value(2e9), size.IntValue(cfg.write), size.Value(cfg.segment)
	fs.StringVar(&cfg.dir, "dir", "", "directory to write in (required; the broker's data directory's file system)")
	fs.Var(&total, "bytes", "bytes to write: with a unit, 2GB")
	fs.Var(&write, "write", "bytes per write(2): a producer batch")
	fs.Var(&segment, "segment", "segment file size: roll to a new file past it")
	syncFlag := fs.String("sync", "always", "when to sync: always (group commit), interval=<duration> or never (only at rolls)")
	fs.IntVar(&cfg.inflight, "inflight", cfg.inflight, "with -sync always: batches written but not yet synced at most (a producer's batches in flight)")
	call := fs.String("call", "fdatasync", "sync call for segment data: fdatasync or fsync")
	timeout := fs.Duration("timeout", 3*time.Minute, "give up after this long")
	asJSON := fs.Bool("json", false, "print one JSON object")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	cfg.total, cfg.write, cfg.segment = int64(total), int(write), int64(segment)
	var err error
	if cfg.policy, cfg.interval, err = parsePolicy(*syncFlag); err != nil {
		fmt.Fprintln(stderr, "diskref:", err)
		return 2
	}
	switch {
	case fs.NArg() > 0:
		err = fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case cfg.dir == "":
		err = errors.New("-dir is required")
	case cfg.total <= 0 || cfg.write <= 0 || cfg.inflight < 1:
		err = errors.New("-bytes, -write and -inflight must be positive")
	case cfg.segment < int64(cfg.write):
		err = fmt.Errorf("-segment %d is smaller than -write %d", cfg.segment, cfg.write)
	case *call != "fdatasync" && *call != "fsync":
		err = fmt.Errorf("-call %q: want fdatasync or fsync", *call)
	}
	if err != nil {
		fmt.Fprintln(stderr, "diskref:", err)
		return 2
	}
	cfg.fsync = *call == "fsync"
	if err := diskfree.Check(cfg.dir, cfg.total+64<<20); err != nil {
		fmt.Fprintf(stderr, "diskref: refusing to start: %v\n", err)
		return 1
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, *timeout)
	defer cancelT()
	r, err := run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "diskref:", err)
		return 1
	}
	r.Sync, r.Call = *syncFlag, *call
	if *asJSON {
		_ = json.NewEncoder(stdout).Encode(r)
	} else {
		fmt.Fprintf(stdout, "bytes=%d seconds=%.3f mb_per_sec=%.1f sync=%s call=%s write=%d segment=%d writes=%d syncs=%d small_syncs=%d sync_mean_ms=%.2f sync_max_ms=%.2f rolls=%d cpu_s=%.3f\n",
			r.Bytes, r.Seconds, r.MBPerSec, r.Sync, r.Call, r.WriteSize, r.SegmentBytes, r.Writes, r.Syncs, r.SmallSyncs, r.SyncMeanMs, r.SyncMaxMs, r.Rolls, r.CPU)
	}
	return 0
}

// parsePolicy reads -sync as the broker reads a topic's fsync option.
func parsePolicy(s string) (policy, time.Duration, error) {
	switch {
	case s == "always":
		return syncAlways, 0, nil
	case s == "never":
		return syncNever, 0, nil
	case strings.HasPrefix(s, "interval="):
		d, err := time.ParseDuration(strings.TrimPrefix(s, "interval="))
		if err != nil || d < time.Millisecond || d > time.Hour {
			return 0, 0, fmt.Errorf("-sync %q: interval=<duration> needs a duration from 1ms to 1h", s)
		}
		return syncInterval, d, nil
	}
	return 0, 0, fmt.Errorf("-sync %q: want always, interval=<duration> or never", s)
}
