package log

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/lightq/lightq/log/vfs/crashfs"
	"github.com/lightq/lightq/wire"
)

// FuzzRecover: arbitrary bytes as the active segment. Open never panics; it either fails with
// ErrCorrupt or yields a log whose file is a prefix of the input, whose batches all verify,
// and which re-reads identically after a reopen (recovery is idempotent).
func FuzzRecover(f *testing.F) {
	rng := rand.New(rand.NewPCG(1, 1))
	var valid []byte
	var off int64
	for i := range 5 {
		b := makeBatch(rng, 1+i, 30, 0)
		wire.SetBaseOffset(b, off) // base offsets as the log writes them: a valid segment
		off += int64(1 + i)
		valid = append(valid, b...)
	}
	f.Add(valid)
	// Both magics in one segment, with a producer's batches in sequence.
	mixed := bytes.Clone(valid)
	for i := range 3 {
		b := producerBatch(rng, 4, 0, int32(3*i), 3, 30)
		wire.SetBaseOffset(b, off)
		off += 3
		mixed = append(mixed, b...)
	}
	f.Add(mixed)
	f.Add(valid[:len(valid)-7])
	f.Add(append(append([]byte(nil), valid...), make([]byte, 100)...))
	f.Add([]byte{})
	f.Add(make([]byte, 44))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		seg := filepath.Join(dir, segmentName(0, logSuffix))
		if err := os.WriteFile(seg, data, 0o644); err != nil {
			t.Fatal(err)
		}
		opts := Options{MaxBatch: 64 << 10, FS: crashfs.New()} // no real fsyncs: fast
		l, err := Open(dir, opts)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open: %v", err)
			}
			return
		}
		kept, _ := os.ReadFile(seg)
		if !bytes.HasPrefix(data, kept) {
			t.Fatal("recovered file is not a prefix of the input")
		}
		got := readAll(t, l)
		states := l.ProducerStates()
		l.Close()
		if cs, err := Verify(dir, opts.FS, opts.MaxBatch); err != nil || len(cs) != 0 {
			t.Fatalf("Verify: %v %v", cs, err)
		}
		l = mustOpen(t, dir, opts)
		defer l.Close()
		sameBatches(t, readAll(t, l), got)
		if l.ProducerStates() != states {
			t.Fatalf("%d producer states after a reopen, %d before", l.ProducerStates(), states)
		}
	})
}

// FuzzIndex: the index decoders never panic, accept only sane input, and re-encode it
// byte for byte.
func FuzzIndex(f *testing.F) {
	f.Add(appendIndex(nil, []indexEntry{{1, 100}, {5, 300}}), int64(1000))
	f.Add(appendTimeIndex(nil, []timeEntry{{10, 1}, {20, 5}}), int64(1000))
	f.Add(make([]byte, 16), int64(10))
	f.Fuzz(func(t *testing.T, data []byte, segSize int64) {
		if ents, err := decodeIndex(data, segSize); err == nil {
			if !bytes.Equal(appendIndex(nil, ents), data) {
				t.Fatal("index does not re-encode")
			}
			for i, e := range ents {
				if e.pos == 0 || int64(e.pos) >= segSize || i > 0 && (e.rel <= ents[i-1].rel || e.pos <= ents[i-1].pos) {
					t.Fatalf("insane entry accepted: %+v", e)
				}
				if pos, _ := floor(ents, e.rel); pos != int64(e.pos) {
					t.Fatalf("floor(%d) = %d, want %d", e.rel, pos, e.pos)
				}
			}
		}
		if ents, err := decodeTimeIndex(data, uint32(segSize)); err == nil {
			if !bytes.Equal(appendTimeIndex(nil, ents), data) {
				t.Fatal("time index does not re-encode")
			}
		}
	})
}
