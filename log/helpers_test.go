package log

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/lightq/lightq/wire"
)

// LIGHTQ_LONG=1 runs the long variants (more crash iterations, more torn-tail positions).
var long = os.Getenv("LIGHTQ_LONG") == "1"

// makeBatch builds a valid uncompressed batch of n records with values of about valueSize
// bytes and timestamps from ts.
func makeBatch(rng *rand.Rand, n, valueSize int, ts int64) []byte {
	var b wire.BatchBuilder
	for i := range n {
		v := make([]byte, valueSize/2+rng.IntN(valueSize/2+1))
		for j := range v {
			v[j] = byte(rng.Uint32())
		}
		b.Append(ts+int64(i), nil, v, nil)
	}
	out, err := b.Finish(wire.CodecNone, nil)
	if err != nil {
		panic(err)
	}
	return append([]byte(nil), out...)
}

// stored is a batch as the log stored it (base offset rewritten).
type stored struct {
	base  int64
	count uint32
	data  []byte
}

func (s stored) next() int64 { return s.base + int64(s.count) }

func mustOpen(t testing.TB, dir string, opts Options) *Log {
	t.Helper()
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return l
}

// appendN appends n random batches and returns them as stored.
func appendN(t testing.TB, l *Log, rng *rand.Rand, n, maxRecords, valueSize int, ts int64) []stored {
	t.Helper()
	var out []stored
	for i := range n {
		count := 1 + rng.IntN(maxRecords)
		b := makeBatch(rng, count, valueSize, ts+int64(i)*10)
		base, err := l.Append(b, uint32(count))
		if err != nil {
			t.Fatalf("Append %d: %v", i, err)
		}
		out = append(out, stored{base: base, count: uint32(count), data: b})
	}
	return out
}

// readAll reads every batch from StartOffset to NextOffset through Read.
func readAll(t testing.TB, l *Log) []stored {
	t.Helper()
	var out []stored
	for off := l.StartOffset(); off < l.NextOffset(); {
		c, err := l.Read(off, l.NextOffset(), 64<<10)
		if err != nil {
			t.Fatalf("Read(%d): %v", off, err)
		}
		buf := make([]byte, c.Len)
		if _, err := c.File.ReadAt(buf, c.Pos); err != nil {
			t.Fatalf("ReadAt: %v", err)
		}
		c.Release()
		for len(buf) > 0 {
			n := wire.BatchSize(buf)
			bt, err := wire.ParseBatch(buf[:n], 1<<20)
			if err != nil {
				t.Fatalf("batch at offset %d: %v", off, err)
			}
			out = append(out, stored{base: bt.BaseOffset, count: bt.RecordCount, data: buf[:n]})
			buf = buf[n:]
		}
		off = c.NextOffset
	}
	return out
}

func sameBatches(t testing.TB, got, want []stored) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d batches, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i].base != want[i].base || !bytes.Equal(got[i].data, want[i].data) {
			t.Fatalf("batch %d: got base %d (%d bytes), want base %d (%d bytes)", i, got[i].base, len(got[i].data), want[i].base, len(want[i].data))
		}
	}
}

func segFiles(t testing.TB, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*"+logSuffix))
	if err != nil {
		t.Fatal(err)
	}
	return m
}
