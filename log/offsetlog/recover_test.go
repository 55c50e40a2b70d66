package offsetlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// logFixture is an offsets log built frame by frame, so each case knows where every frame
// is and what state each prefix holds.
type logFixture struct {
	data   []byte
	ends   []int           // end of each frame (the header ends at headerSize)
	states []map[key]int64 // states[i]: after the first i frames
	frames [][]Entry       // the records of each frame
}

func newLogFixture(rng *rand.Rand, frames int) logFixture {
	f := logFixture{data: appendHeader(nil), states: []map[key]int64{{}}}
	for range frames {
		start := len(f.data)
		f.data = startFrame(f.data)
		st := copyState(f.states[len(f.states)-1])
		var recs []Entry
		for range 1 + rng.IntN(20) {
			e := Entry{Group: "g" + strconv.Itoa(rng.IntN(8)), Partition: uint32(rng.IntN(4)), Offset: rng.Int64N(1 << 40)}
			f.data = appendRecord(f.data, e.Group, e.Partition, e.Offset)
			st[key{e.Group, e.Partition}] = e.Offset
			recs = append(recs, e)
		}
		sealFrame(f.data[start:])
		f.ends = append(f.ends, len(f.data))
		f.states = append(f.states, st)
		f.frames = append(f.frames, recs)
	}
	return f
}

func copyState(m map[key]int64) map[key]int64 {
	out := make(map[key]int64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// writeLog writes data as the offsets log of a fresh directory.
func writeLog(t *testing.T, data []byte) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, fileName), data, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// checkRecovered opens dir and checks the state, the file's new size, the .broken copy of
// the cut bytes (without trailing zeros), and that commits continue and survive another
// reopen. A cut of zeros only is no cut: zeros after the log are its preallocated space.
func checkRecovered(t *testing.T, dir string, want map[key]int64, size int, cut []byte) {
	t.Helper()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	sameState(t, state(s), want)
	if allZero(cut) {
		size += len(cut) // zeros after the log are preallocated space: kept
	}
	if st, _ := os.Stat(filepath.Join(dir, fileName)); st.Size() != int64(size) {
		t.Fatalf("log is %d bytes after recovery, want %d", st.Size(), size)
	}
	broken, _ := filepath.Glob(filepath.Join(dir, fileName+brokenSuffix+"*"))
	switch {
	case allZero(cut) && len(broken) != 0:
		t.Fatalf(".broken files %v, but nothing was cut", broken)
	case !allZero(cut) && len(broken) != 1:
		t.Fatalf(".broken files %v, want one", broken)
	case !allZero(cut):
		if b, _ := os.ReadFile(broken[0]); !bytes.Equal(b, bytes.TrimRight(cut, "\x00")) {
			t.Fatalf(".broken file holds %d bytes, want the %d cut", len(b), len(cut))
		}
	}
	if err := commitWait(t, s, "after", 1, 42); err != nil {
		t.Fatalf("commit after recovery: %v", err)
	}
	s.Close()
	want = copyState(want)
	want[key{"after", 1}] = 42
	s = mustOpen(t, dir, Options{})
	defer s.Close()
	sameState(t, state(s), want)
}

func TestTornTailTruncation(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	f := newLogFixture(rng, 30)
	for i := range 60 {
		cutAt := headerSize + rng.IntN(len(f.data)-headerSize)
		if i == 0 {
			cutAt = headerSize + 1
		}
		k := 0 // whole frames before the cut
		for k < len(f.ends) && f.ends[k] <= cutAt {
			k++
		}
		whole := headerSize
		if k > 0 {
			whole = f.ends[k-1]
		}
		t.Run(fmt.Sprintf("cut at %d", cutAt), func(t *testing.T) {
			dir := writeLog(t, f.data[:cutAt])
			checkRecovered(t, dir, f.states[k], whole, f.data[whole:cutAt])
		})
	}
}

func TestGarbageTails(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	f := newLogFixture(rng, 10)
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	frame := func() []byte { // a valid frame to damage
		b := startFrame(nil)
		b = appendRecord(b, "late", 3, 77)
		b = appendRecord(b, "late", 4, 78)
		sealFrame(b)
		return b
	}
	cases := []struct {
		name    string
		garbage func() []byte
	}{
		{"zeros", func() []byte { return make([]byte, 1+rng.IntN(8<<10)) }},
		{"ones", func() []byte { return bytes.Repeat([]byte{0xff}, 1+rng.IntN(8<<10)) }},
		{"random", func() []byte { return random(1 + rng.IntN(8<<10)) }},
		{"partial header", func() []byte { return frame()[:1+rng.IntN(frameHeaderSize-1)] }},
		{"partial frame", func() []byte { b := frame(); return b[:frameHeaderSize+rng.IntN(len(b)-frameHeaderSize)] }},
		{"bad crc", func() []byte { b := frame(); b[len(b)-1] ^= 1; return b }},
		{"huge length", func() []byte { b := frame(); binary.BigEndian.PutUint32(b[4:], MaxFrameBody+1); return b }},
		{"zero length", func() []byte { b := frame(); binary.BigEndian.PutUint32(b[4:], 0); return b }},
		{"valid crc, record type 0", func() []byte { b := frame(); b[frameHeaderSize] = 0; sealFrame(b); return b }},
		{"valid crc, record cut short", func() []byte {
			b := startFrame(nil)
			b = appendRecord(b, "late", 3, 77)
			b = b[:len(b)-1]
			sealFrame(b)
			return b
		}},
		{"valid crc, negative offset", func() []byte { b := frame(); b[frameHeaderSize+6] = 0x80; sealFrame(b); return b }},
		{"zeros then random", func() []byte { return append(make([]byte, 512), random(1000)...) }},
	}
	for _, tc := range cases {
		for range 3 {
			t.Run(tc.name, func(t *testing.T) {
				garbage := tc.garbage()
				dir := writeLog(t, append(append([]byte(nil), f.data...), garbage...))
				checkRecovered(t, dir, f.states[len(f.states)-1], len(f.data), garbage)
			})
		}
	}
}

// snapshotDir describes every file in dir (name, size, contents' checksum).
func snapshotDir(t *testing.T, dir string) string {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	var sb strings.Builder
	for _, e := range ents {
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		fmt.Fprintf(&sb, "%s %d %x\n", e.Name(), len(b), crc32.ChecksumIEEE(b))
	}
	return sb.String()
}

// Damage before the last frame is corruption: Open refuses, names the file and the byte,
// and changes nothing.
func TestMidCorruption(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	f := newLogFixture(rng, 20)
	cases := []struct {
		name    string
		corrupt func(data []byte, frame int) // damage frame (never the last)
	}{
		{"bit flip", func(data []byte, k int) {
			start := f.start(k)
			at := start + rng.IntN(f.ends[k]-start)
			data[at] ^= 1 << rng.IntN(8)
		}},
		{"zeroed sector", func(data []byte, k int) { clear(data[f.start(k):f.ends[k]]) }},
		{"length too short", func(data []byte, k int) {
			binary.BigEndian.PutUint32(data[f.start(k)+4:], uint32(f.ends[k]-f.start(k)-frameHeaderSize-1))
		}},
	}
	for _, tc := range cases {
		for range 5 {
			t.Run(tc.name, func(t *testing.T) {
				data := append([]byte(nil), f.data...)
				k := rng.IntN(len(f.ends) - 1)
				tc.corrupt(data, k)
				dir := writeLog(t, data)
				before := snapshotDir(t, dir)
				_, err := Open(dir, Options{})
				path := filepath.Join(dir, fileName)
				if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) ||
					!strings.Contains(err.Error(), "byte "+strconv.Itoa(f.start(k))) {
					t.Fatalf("frame %d at byte %d damaged: Open = %v", k, f.start(k), err)
				}
				if after := snapshotDir(t, dir); after != before {
					t.Fatalf("files changed:\n%s\n%s", before, after)
				}
			})
		}
	}
}

func (f logFixture) start(k int) int {
	if k == 0 {
		return headerSize
	}
	return f.ends[k-1]
}

func TestBadHeader(t *testing.T) {
	f := newLogFixture(rand.New(rand.NewPCG(4, 4)), 3)
	cases := map[string][]byte{
		"empty file":    nil,
		"short header":  f.data[:5],
		"wrong magic":   append([]byte("LQOX"), f.data[4:]...),
		"format 2":      append(append([]byte(nil), f.data[:4]...), append([]byte{0, 0, 0, 2}, f.data[8:]...)...),
		"zeroed header": append(make([]byte, headerSize), f.data[headerSize:]...),
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			dir := writeLog(t, data)
			if _, err := Open(dir, Options{}); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "header") {
				t.Fatalf("Open = %v, want ErrCorrupt about the header", err)
			}
		})
	}
}

// A snapshot that died before its rename leaves a temp file: Open removes it and keeps the log.
func TestLeftoverTempFile(t *testing.T) {
	f := newLogFixture(rand.New(rand.NewPCG(5, 5)), 5)
	dir := writeLog(t, f.data)
	if err := os.WriteFile(filepath.Join(dir, fileName+tmpSuffix), f.data[:20], 0o600); err != nil {
		t.Fatal(err)
	}
	checkRecovered(t, dir, f.states[len(f.states)-1], len(f.data), nil)
	if _, err := os.Stat(filepath.Join(dir, fileName+tmpSuffix)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temp file still there: %v", err)
	}
}
