package compare

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/lightq/lightq/tools/internal/diskfree"
)

// The sustained durable cases (families durable and fsync): each LightQ measurement moves
// -sustain-bytes (2 GB) through the disk and each NATS one publishes for at least
// -sustain-time (10 s), in two shapes, and each is preceded in every round by a disk
// reference (tools/diskref) writing the same bytes the way the broker does, so that a
// durable figure reads as a share of what the disk gave in the same minutes.

// shape is how a durable case consumes what it produced.
type shape int

const (
	thenReadBack shape = iota // produce everything, then one consumer reads it from the beginning
	atOnce                    // a consumer reads from the beginning while the producer produces
)

// The LightQ producer's batch and batches in flight in the durable cases (lqbench's defaults,
// passed explicitly so that the disk reference writes and waits the same way).
const (
	lqBatch    = 512 << 10
	lqInflight = 16
)

// sustainMsgs is the number of size-byte messages that make up bytes (rounded up).
func sustainMsgs(bytes int64, size int) int {
	return int((bytes + int64(size) - 1) / int64(size))
}

func (r *runner) sustainedCases() []caseDef {
	cfg := r.cfg
	var out []caseDef
	durable := func(family string, size int, sh shape) caseDef {
		id, name, what := fmt.Sprintf("%s-%d", family, size), "produce then read back", "read-back"
		if sh == atOnce {
			id, name, what = id+"-at-once", "produce and consume at once", "consume (at once)"
		}
		// interval=2m: acknowledged after the write, fsync every 2 min = JetStream's default.
		fsync, acks, natsSync, ref := "interval=2m", "written", "", "interval=2m"
		title := fmt.Sprintf("durable %d B, acks=written, %s (JetStream file, async pub)", size, name)
		refLabel := "disk reference MB/s (segment rolls' fdatasync only, as fsync=interval=2m)"
		var tp, ts *target
		if family == "fsync" {
			fsync, acks, natsSync, ref = "always", "durable", "always", "always"
			title = fmt.Sprintf("durable %d B, fsync before ack, %s (fsync=always vs sync_interval=always)", size, name)
			refLabel = fmt.Sprintf("disk reference MB/s (group-commit fdatasync, %d batches in flight)", lqInflight)
			if sh == thenReadBack {
				tp = ratioAtLeast(100)
			}
		} else if size == 100 && sh == thenReadBack {
			tp, ts = ratioAtLeast(10), ratioAtLeast(5)
		}
		sustained := func(side string, fn func(context.Context) (sample, error)) func(context.Context) (sample, error) {
			return func(ctx context.Context) (sample, error) {
				s, err := fn(ctx)
				if err == nil && s.short(cfg) {
					s["short"] = 1
					r.logf("%s %s: not sustained: %.3f GB in %.2f s, below both -sustain-bytes and -sustain-time", id, side, s["pub_gb"], s["pub_s"])
				}
				return s, err
			}
		}
		return caseDef{id: id, family: family, size: size, title: title,
			rows: []rowDef{{key: "pub", label: "msgs/s produce", target: tp}, {key: "sub", label: "msgs/s " + what, target: ts},
				{key: "pub_mb", label: "produce MB/s / disk reference MB/s", share: &shareDef{denSide: "ref", denKey: "mb", of: "the disk", pct: true}},
				{key: "mb", label: refLabel, ref: true},
				{key: "pub_s", label: "seconds producing", noRatio: true}},
			ref:    func(ctx context.Context) (sample, error) { return r.diskRef(ctx, ref) },
			lightq: sustained("lightq", func(ctx context.Context) (sample, error) { return r.lqDurable(ctx, plain, size, fsync, acks, sh) }),
			nats:   sustained("nats", func(ctx context.Context) (sample, error) { return r.natsJS(ctx, plain, size, natsSync, sh) })}
	}
	if contains(cfg.Cases, "durable") {
		for _, size := range []int{100, 1024} {
			out = append(out, durable("durable", size, thenReadBack), durable("durable", size, atOnce))
		}
	}
	if contains(cfg.Cases, "fsync") {
		out = append(out, durable("fsync", 100, thenReadBack), durable("fsync", 100, atOnce))
	}
	return out
}

// short reports whether a sustained measurement produced less than -sustain-bytes in less
// than -sustain-time (a NATS rate that rose after calibration, say).
func (s sample) short(cfg Config) bool {
	return s["pub_s"] < cfg.SustainTime.Seconds() && s["pub_gb"]*1e9 < float64(cfg.SustainBytes)
}

// shortNote lists the measurements that were not sustained, for under the table; "" when
// there are none.
func (r *report) shortNote() string { return r.shortNoteOf(func(caseDef) bool { return true }) }

// shortNoteOf is shortNote for the cases keep selects.
func (r *report) shortNoteOf(keep func(caseDef) bool) string {
	var list []string
	for _, c := range r.cases {
		if !keep(c) {
			continue
		}
		for _, side := range sides {
			for i, s := range r.data[c.id][side] {
				if s != nil && s["short"] > 0 {
					list = append(list, fmt.Sprintf("%s %s round %d (%.3f GB in %.2f s)", c.id, side, i+1, s["pub_gb"], s["pub_s"]))
				}
			}
		}
	}
	if len(list) == 0 {
		return ""
	}
	return "Not sustained (below both the bytes and the time asked): " + strings.Join(list, "; ") + ".\n"
}

// isSustained reports whether a case writes -sustain-bytes to the disk (the replicated
// cases write -repl-bytes to each broker's).
func isSustained(c caseDef) bool { return c.family == "durable" || c.family == "fsync" }

// diskNeed is the free space a sustained measurement needs for copies copies of bytes: a
// quarter more for LightQ's record framing and NATS's per-message overhead, and 256 MiB to
// spare.
func diskNeed(bytes int64, copies int) int64 { return int64(copies)*(bytes*5/4) + 256<<20 }

// checkDisk refuses a sustained measurement of -sustain-bytes when the work directory's disk
// lacks the space, saying what earlier runs left behind.
func (r *runner) checkDisk() error { return r.checkDiskFor(r.cfg.SustainBytes, 1) }

// checkDiskFor is checkDisk for copies copies of bytes (a replicated topic's, one per broker).
func (r *runner) checkDiskFor(bytes int64, copies int) error {
	err := diskfree.Check(r.work, diskNeed(bytes, copies))
	if err == nil {
		return nil
	}
	note := ""
	if n, gb := staleRuns(filepath.Dir(r.work), r.work); n > 0 {
		note = fmt.Sprintf("; %d earlier run(s) left %.2f GB in %s: remove them if no compare is running",
			n, gb, filepath.Join(filepath.Dir(r.work), workPrefix+"*"))
	}
	what := fmt.Sprintf("-sustain-bytes %d x 1.25 + 256 MiB", bytes)
	if copies > 1 {
		what = fmt.Sprintf("%d copies of %d bytes x 1.25 + 256 MiB", copies, bytes)
	}
	return fmt.Errorf("%w for a sustained measurement (%s; pass a smaller -sustain-bytes or a -work-dir with room)%s",
		err, what, note)
}

// workPrefix names the work directories of runs of this tool.
const workPrefix = "lightq-compare-"

// staleRuns counts the work directories in parent other than ours and the GB they hold.
func staleRuns(parent, ours string) (n int, gb float64) {
	dirs, _ := filepath.Glob(filepath.Join(parent, workPrefix+"*"))
	for _, d := range dirs {
		if d == ours {
			continue
		}
		n++
		_ = filepath.WalkDir(d, func(_ string, e fs.DirEntry, err error) error {
			if err == nil && e.Type().IsRegular() {
				if fi, err := e.Info(); err == nil {
					gb += float64(fi.Size()) / 1e9
				}
			}
			return nil
		})
	}
	return n, gb
}

// diskRef: tools/diskref writes -sustain-bytes in a fresh directory on the brokers' disk,
// in lqbench's batch size, with the segment rolls and the sync policy of the case.
func (r *runner) diskRef(ctx context.Context, policy string) (sample, error) {
	if err := r.checkDisk(); err != nil {
		return nil, err
	}
	dir := r.tempDir("diskref")
	defer os.RemoveAll(dir)
	return r.measure(ctx, nil, func(m *meas) error {
		m.timeout = r.cfg.SustainTimeout
		c := m.client(ctx, "clients", filepath.Join(r.bin, "diskref"), "-json", "-dir", dir,
			"-bytes", strconv.FormatInt(r.cfg.SustainBytes, 10), "-write", strconv.Itoa(lqBatch),
			"-inflight", strconv.Itoa(lqInflight), "-sync", policy, "-timeout", r.cfg.SustainTimeout.String())
		if err := c.run(); err != nil {
			return err
		}
		var res struct {
			MBPerSec   float64 `json:"mb_per_sec"`
			Seconds    float64 `json:"seconds"`
			Syncs      float64 `json:"syncs"`
			SyncMeanMs float64 `json:"sync_mean_ms"`
			SyncMaxMs  float64 `json:"sync_max_ms"`
		}
		if err := json.Unmarshal(c.stdout.Bytes(), &res); err != nil {
			return fmt.Errorf("diskref output: %v: %q", err, tail(c.stdout.String(), 300))
		}
		m.s["mb"], m.s["seconds"], m.s["syncs"] = res.MBPerSec, res.Seconds, res.Syncs
		m.s["sync_mean_ms"], m.s["sync_max_ms"] = res.SyncMeanMs, res.SyncMaxMs
		return nil
	})
}

// setProduced records a sustained producer's figures: msgs/s, MB/s, seconds and GB.
func (s sample) setProduced(msgs int, seconds float64, size int) {
	s["pub_s"] = seconds
	s["pub_gb"] = float64(msgs) * float64(size) / 1e9
	if seconds > 0 {
		s["pub"] = float64(msgs) / seconds
		s["pub_mb"] = s["pub"] * float64(size) / 1e6
	}
}

// The NATS side publishes in chunks (one `nats bench js pub` run each, into the same
// stream) until -sustain-time of publishing has accumulated: nats bench has only a message
// count, and JetStream's rate is not known in advance.
const (
	natsFirstChunk = 2_000      // messages of the first chunk, which measures the rate
	natsMaxChunk   = 50_000_000 // a chunk's messages at most
	natsMaxChunks  = 8
)

// natsProduceFor calls chunk (which publishes n messages and returns its rate) until the
// chunks' publishing time adds up to minSecs, each next chunk sized from the last rate to
// fill the rest, at most natsMaxChunks times. It returns the messages and seconds in all.
func natsProduceFor(minSecs float64, chunk func(n int) (rate float64, err error)) (total int, secs float64, err error) {
	n := natsFirstChunk
	for i := 0; i < natsMaxChunks; i++ {
		rate, err := chunk(n)
		if err != nil {
			return total, secs, err
		}
		if !(rate > 0) {
			return total, secs, fmt.Errorf("a chunk of %d messages reported rate %v", n, rate)
		}
		total += n
		secs += float64(n) / rate
		if secs >= minSecs {
			break
		}
		n = int(min(max(math.Ceil(rate*(minSecs-secs)*1.1), natsFirstChunk), natsMaxChunk))
	}
	return total, secs, nil
}

// natsCalibration is how long a NATS at-once case publishes first to learn the rate: a
// tenth of the sustained time, at most a second (a run of a few thousand messages says
// little on a loaded machine).
func natsCalibration(minSecs float64) float64 { return min(minSecs/10, 1) }

// natsAtOnceCount is the message count for a NATS run that publishes while the consumer
// reads: from the calibration's rate, enough for -sustain-time with a quarter to spare.
func natsAtOnceCount(rate, minSecs float64) int {
	return int(min(max(math.Ceil(rate*minSecs*1.25), natsFirstChunk), natsMaxChunk))
}

// natsMaxBytes is the JetStream stream's byte limit in the sustained cases: room for
// twice -sustain-bytes, at least 1 GB (a limit, not an allocation).
func (r *runner) natsMaxBytes() int64 { return max(2*r.cfg.SustainBytes, 1e9) }

// tlsDurableCase is the durable 1024 B read-back over TLS: both brokers serve one certificate
// (r.pki) and the clients verify it; sustained like the plaintext durable cases (LightQ moves
// -sustain-bytes, NATS publishes for -sustain-time). What it measures is TLS on the read-back
// path (sendfile is not possible through TLS in user space), so it has no disk reference row.
func (r *runner) tlsDurableCase() caseDef {
	cfg := r.cfg
	short := func(side string, fn func(context.Context) (sample, error)) func(context.Context) (sample, error) {
		return func(ctx context.Context) (sample, error) {
			s, err := fn(ctx)
			if err == nil && s.short(cfg) {
				s["short"] = 1
				r.logf("tls-durable-1024 %s: not sustained: %.3f GB in %.2f s, below both -sustain-bytes and -sustain-time", side, s["pub_gb"], s["pub_s"])
			}
			return s, err
		}
	}
	return caseDef{id: "tls-durable-1024", family: "tls", size: 1024,
		title: "TLS, durable 1024 B, acks=written, read back (JetStream file over TLS)",
		rows: []rowDef{{key: "pub", label: "msgs/s produce"}, {key: "sub", label: "msgs/s read-back", target: ratioAtLeast(1.5)},
			{key: "pub_s", label: "seconds producing", noRatio: true}},
		lightq: short("lightq", func(ctx context.Context) (sample, error) {
			return r.lqDurable(ctx, overTLS, 1024, "interval=2m", "written", thenReadBack)
		}),
		nats: short("nats", func(ctx context.Context) (sample, error) { return r.natsJS(ctx, overTLS, 1024, "", thenReadBack) })}
}
