package log

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lightq/lightq/log/producerstate"
	"github.com/lightq/lightq/log/vfs"
	"github.com/lightq/lightq/log/vfs/crashfs"
	"github.com/lightq/lightq/wire"
)

// producerBatch builds a magic-2 batch of n records from producer id (epoch) starting at
// sequence seq.
func producerBatch(rng *rand.Rand, id int64, epoch int16, seq int32, n, valueSize int) []byte {
	var b wire.BatchBuilder
	b.SetMagic(wire.BatchMagic2)
	for i := range n {
		v := make([]byte, valueSize/2+rng.IntN(valueSize/2+1))
		for j := range v {
			v[j] = byte(rng.Uint32())
		}
		b.Append(int64(i), nil, v, nil)
	}
	b.SetProducer(id, epoch, seq)
	out, err := b.Finish(wire.CodecNone, nil)
	if err != nil {
		panic(err)
	}
	return append([]byte(nil), out...)
}

// sent is a batch a producer appended, with the base offset it got.
type sent struct {
	data  []byte
	count uint32
	base  int64
}

// producer numbers batches as a client would.
type producer struct {
	id    int64
	epoch int16
	seq   int32
	sent  []sent
}

func (p *producer) next(rng *rand.Rand) ([]byte, uint32) {
	n := 1 + rng.IntN(4)
	b := producerBatch(rng, p.id, p.epoch, p.seq, n, 60)
	p.seq = wire.NextSequence(p.seq, uint32(n))
	return b, uint32(n)
}

func TestAppendIdempotent(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	l := mustOpen(t, t.TempDir(), Options{})
	defer l.Close()
	p := &producer{id: 5}
	for range 3 {
		b, n := p.next(rng)
		base, err := l.Append(b, n)
		if err != nil {
			t.Fatal(err)
		}
		p.sent = append(p.sent, sent{data: b, count: n, base: base})
	}
	// Plain batches in between change nothing for the producer.
	appendN(t, l, rng, 2, 3, 50, 0)
	next := l.NextOffset()
	for _, s := range p.sent {
		base, err := l.Append(append([]byte(nil), s.data...), s.count)
		if !errors.Is(err, ErrDuplicate) || base != s.base {
			t.Fatalf("re-sent batch: %d %v, want %d ErrDuplicate", base, err, s.base)
		}
	}
	if l.NextOffset() != next || l.ProducerStates() != 1 {
		t.Fatalf("duplicates appended: next %d, want %d; %d states", l.NextOffset(), next, l.ProducerStates())
	}
	gapped := producerBatch(rng, 5, 0, p.seq+1, 1, 10)
	if _, err := l.Append(gapped, 1); !errors.Is(err, wire.ErrOutOfOrderSequence) {
		t.Fatalf("gap: %v", err)
	}
	unknown := producerBatch(rng, 6, 0, 3, 1, 10)
	if _, err := l.Append(unknown, 1); !errors.Is(err, wire.ErrUnknownProducer) {
		t.Fatalf("unknown: %v", err)
	}
	bumped := producerBatch(rng, 5, 1, 0, 1, 10)
	if _, err := l.Append(bumped, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(append([]byte(nil), p.sent[2].data...), p.sent[2].count); !errors.Is(err, wire.ErrProducerFenced) {
		t.Fatalf("old epoch: %v", err)
	}
	if l.NextOffset() != next+1 {
		t.Fatalf("refused batches appended: next %d, want %d", l.NextOffset(), next+1)
	}
}

// TestProducerCap: the per-log cap and the shared budget refuse new producers with
// producerstate.ErrTooManyProducers.
func TestProducerCap(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	budget := producerstate.NewBudget(3)
	l1 := mustOpen(t, t.TempDir(), Options{Producers: ProducerOptions{MaxProducers: 2, Budget: budget}})
	defer l1.Close()
	l2 := mustOpen(t, t.TempDir(), Options{Producers: ProducerOptions{Budget: budget}})
	defer l2.Close()
	for id := int64(0); id < 2; id++ {
		if _, err := l1.Append(producerBatch(rng, id, 0, 0, 1, 10), 1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l1.Append(producerBatch(rng, 9, 0, 0, 1, 10), 1); !errors.Is(err, producerstate.ErrTooManyProducers) {
		t.Fatalf("past the log's cap: %v", err)
	}
	if _, err := l2.Append(producerBatch(rng, 9, 0, 0, 1, 10), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := l2.Append(producerBatch(rng, 10, 0, 0, 1, 10), 1); !errors.Is(err, producerstate.ErrTooManyProducers) {
		t.Fatalf("past the budget: %v", err)
	}
	l1.Close()
	if budget.Used() != 1 {
		t.Fatalf("Close gave back the budget: %d used", budget.Used())
	}
}

// resend re-sends the producer's last window batches in order, checking that those the log
// holds are answered with their original base offsets and nothing is written twice, then
// appends a new batch, which must be stored.
func resend(t *testing.T, l *Log, rng *rand.Rand, p *producer) {
	t.Helper()
	next := l.NextOffset()
	from := max(0, len(p.sent)-producerstate.Window)
	for _, s := range p.sent[from:] {
		base, err := l.Append(append([]byte(nil), s.data...), s.count)
		if !errors.Is(err, ErrDuplicate) || base != s.base {
			t.Fatalf("producer %d: re-sent batch of base %d: got %d, %v", p.id, s.base, base, err)
		}
	}
	if l.NextOffset() != next {
		t.Fatalf("re-sent batches were stored again: next %d, want %d", l.NextOffset(), next)
	}
	b, n := p.next(rng)
	base, err := l.Append(b, n)
	if err != nil || base != next {
		t.Fatalf("producer %d: new batch after re-sending: %d %v (want %d)", p.id, base, err, next)
	}
	p.sent = append(p.sent, sent{data: b, count: n, base: base})
}

// TestProducerStateAcrossRestarts: after a reopen, however the state is found again (the
// active segment alone, snapshots at rolls with retention deleting old segments, a damaged
// or missing snapshot), re-sent batches are still recognised.
func TestProducerStateAcrossRestarts(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		batches int
		damage  func(t *testing.T, dir string) // between Close and Open
		logs    string                         // what Open must report, if anything
	}{
		{"active segment only", Options{}, 30, nil, ""},
		{"snapshots at rolls", Options{SegmentBytes: 2048}, 200, nil, ""},
		{"retention deleted the producers' segments", Options{SegmentBytes: 2048, RetentionBytes: 4096}, 200, nil, ""},
		{"newest snapshot damaged", Options{SegmentBytes: 2048}, 200, func(t *testing.T, dir string) {
			snaps := snapshotFiles(t, dir)
			flipByte(t, snaps[len(snaps)-1], 40)
		}, "not used"},
		{"every snapshot removed", Options{SegmentBytes: 2048}, 200, func(t *testing.T, dir string) {
			for _, f := range snapshotFiles(t, dir) {
				if err := os.Remove(f); err != nil {
					t.Fatal(err)
				}
			}
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, 3))
			dir := t.TempDir()
			l := mustOpen(t, dir, tt.opts)
			ps := []*producer{{id: 1}, {id: 2, epoch: 3}, {id: 77}}
			for i := range tt.batches {
				p := ps[i%len(ps)]
				if i > tt.batches/2 && p.id == 1 {
					continue // producer 1 goes quiet: its batches end up in old segments
				}
				b, n := p.next(rng)
				base, err := l.Append(b, n)
				if err != nil {
					t.Fatal(err)
				}
				p.sent = append(p.sent, sent{data: b, count: n, base: base})
				if rng.IntN(5) == 0 {
					appendN(t, l, rng, 1, 3, 60, 0) // plain batches between
				}
				if err := l.EnforceRetention(); err != nil {
					t.Fatal(err)
				}
			}
			if tt.opts.SegmentBytes > 0 {
				if n := len(snapshotFiles(t, dir)); n == 0 || n > keepSnapshots {
					t.Fatalf("%d snapshot files, want 1 to %d", n, keepSnapshots)
				}
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if tt.damage != nil {
				tt.damage(t, dir)
			}
			var logs strings.Builder
			opts := tt.opts
			opts.Logf = func(f string, a ...any) { logs.WriteString(strings.TrimSpace(fmt.Sprintf(f, a...)) + "\n") }
			l = mustOpen(t, dir, opts)
			defer l.Close()
			if tt.logs != "" && !strings.Contains(logs.String(), tt.logs) {
				t.Fatalf("Open did not report %q:\n%s", tt.logs, logs.String())
			}
			if l.ProducerStates() != len(ps) {
				t.Fatalf("%d producer states after reopening, want %d", l.ProducerStates(), len(ps))
			}
			for _, p := range ps {
				resend(t, l, rng, p)
			}
		})
	}
}

func snapshotFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*"+producersSuffix))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func flipByte(t *testing.T, path string, pos int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[pos%len(b)] ^= 0xff
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestProducerStateAfterCrash kills the process (kill -9: what was written stays in the page
// cache) or cuts the power (crashfs.Crash: only what was fsynced is sure to stay) at a random
// file system operation, often inside a roll writing a snapshot. After recovery each
// producer re-sends its last batches in order, as a reconnecting client does: the batches
// the log kept are answered with their original offsets and not stored again; the ones it
// lost are stored, in sequence; nothing is stored twice.
func TestProducerStateAfterCrash(t *testing.T) {
	iters := 100
	if testing.Short() {
		iters = 30
	}
	for i := range iters {
		seed := uint64(500 + i)
		powerLoss := i%2 == 1
		if !t.Run("", func(t *testing.T) { producerCrashOnce(t, seed, powerLoss) }) {
			t.Fatalf("seed %d (power loss %v) failed", seed, powerLoss)
		}
	}
}

func producerCrashOnce(t *testing.T, seed uint64, powerLoss bool) {
	rng := rand.New(rand.NewPCG(seed, 91))
	dir := t.TempDir()
	fsys := crashfs.New()
	opts := Options{FS: fsys, SegmentBytes: int64(1<<10 + rng.IntN(3<<10)), IndexIntervalBytes: 256, CheckpointInterval: -1}
	l := mustOpen(t, dir, opts)
	fsys.KillAfter(1 + rng.IntN(200))
	ps := []*producer{{id: 10}, {id: 11}, {id: 12}}
	var durable int64
	for step := 0; step < 400; step++ {
		var err error
		if rng.IntN(5) == 0 {
			var d int64
			if d, err = l.Sync(); err == nil {
				durable = d
			}
		} else {
			p := ps[rng.IntN(len(ps))]
			b, n := p.next(rng)
			var base int64
			if base, err = l.Append(b, n); err == nil {
				p.sent = append(p.sent, sent{data: b, count: n, base: base})
			}
		}
		if err != nil {
			if dead, _, _ := fsys.Killed(); !dead {
				t.Fatalf("error before the kill: %v", err)
			}
			break
		}
	}
	reopen := opts
	if powerLoss {
		if err := fsys.Crash(rng); err != nil {
			t.Fatal(err)
		}
	} else {
		reopen.FS = vfs.OS // the process died; the page cache holds every write
	}
	reopen.Logf = t.Logf
	l2 := mustOpen(t, dir, reopen)
	defer l2.Close()
	stored := map[int64]bool{}
	for _, b := range readAll(t, l2) {
		stored[b.base] = true
	}
	for _, p := range ps {
		// The log keeps a prefix of each producer's batches: re-send from the first of the
		// last Window batches it holds (or the first lost one, when fewer are held).
		kept := 0
		for kept < len(p.sent) && stored[p.sent[kept].base] {
			kept++
		}
		for _, s := range p.sent[kept:] {
			if stored[s.base] {
				t.Fatalf("producer %d: batch at %d kept after a lost one", p.id, s.base)
			}
			if powerLoss && s.base < durable || !powerLoss {
				t.Fatalf("producer %d: batch at %d lost (durable %d, power loss %v)", p.id, s.base, durable, powerLoss)
			}
		}
		from := max(0, kept-producerstate.Window)
		for i, s := range p.sent[from:] {
			base, err := l2.Append(append([]byte(nil), s.data...), s.count)
			switch {
			case from+i < kept && (!errors.Is(err, ErrDuplicate) || base != s.base):
				t.Fatalf("producer %d: kept batch %d (base %d) re-sent: %d, %v", p.id, from+i, s.base, base, err)
			case from+i >= kept && err != nil:
				t.Fatalf("producer %d: lost batch %d re-sent: %v", p.id, from+i, err)
			}
		}
	}
	if cs, err := Verify(dir, reopen.FS, 0); err != nil || len(cs) != 0 {
		t.Fatalf("Verify: %v %v", cs, err)
	}
}
