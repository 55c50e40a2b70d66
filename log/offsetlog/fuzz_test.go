package offsetlog

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/lightq/lightq/log/vfs/crashfs"
)

// fuzzSeeds adds logs (without their header) to f: whole, cut, with zeros after, damaged.
func fuzzSeeds(f *testing.F) {
	fx := newLogFixture(rand.New(rand.NewPCG(1, 1)), 6)
	body := fx.data[headerSize:]
	f.Add(body)
	f.Add(body[:len(body)-5])
	f.Add(append(append([]byte(nil), body...), make([]byte, 100)...))
	mid := append([]byte(nil), body...)
	mid[fx.ends[1]-headerSize-1] ^= 4
	f.Add(mid)
	f.Add([]byte{})
	f.Add(make([]byte, frameHeaderSize))
}

// validPrefix re-encodes the valid frames at the start of body from what decoding yields,
// checking that they re-encode byte for byte, and returns their length and the
// last-write-wins state.
func validPrefix(t *testing.T, body []byte) (int, map[key]int64) {
	var again []byte
	want := map[key]int64{}
	p := 0
	for {
		n := frameAt(body[p:])
		if n == 0 {
			break
		}
		start := len(again)
		again = startFrame(again)
		eachRecord(body[p+frameHeaderSize:p+n], func(g []byte, part uint32, off int64) {
			again = appendRecord(again, string(g), part, off)
			want[key{string(g), part}] = off
		})
		sealFrame(again[start:])
		p += n
	}
	if valid := decodeFrames(body, func([]byte, uint32, int64) {}); valid != p {
		t.Fatalf("decodeFrames: valid prefix %d, frame walk %d", valid, p)
	}
	if !bytes.Equal(again, body[:p]) {
		t.Fatal("the valid prefix does not re-encode to the same bytes")
	}
	return p, want
}

// FuzzDecode: arbitrary bytes as frames, decoded in memory only (fast). Decoding never
// panics, and the valid prefix re-encodes to the same bytes frame by frame.
func FuzzDecode(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		p, _ := validPrefix(t, body)
		_ = validFrameAfter(body[p:])
	})
}

// FuzzRecover: arbitrary bytes after a valid header as the offsets log. Decoding never
// panics; the valid prefix re-encodes to the same bytes frame by frame; Open either fails
// with ErrCorrupt exactly when a valid frame follows the damage, or yields the
// last-write-wins state of the valid prefix, with the file cut to it (unless only zeros,
// preallocated space, follow it), and the same state
// again after a reopen (recovery is idempotent).
func FuzzRecover(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		p, want := validPrefix(t, body)

		dir := t.TempDir()
		path := filepath.Join(dir, fileName)
		if err := os.WriteFile(path, append(appendHeader(nil), body...), 0o600); err != nil {
			t.Fatal(err)
		}
		opts := Options{FS: crashfs.New()} // no real fsyncs: fast
		s, err := Open(dir, opts)
		if corrupt := p < len(body) && validFrameAfter(body[p:]); corrupt != errors.Is(err, ErrCorrupt) || err != nil && !corrupt {
			t.Fatalf("Open: %v; damage at %d followed by a valid frame: %v", err, p, corrupt)
		}
		if err != nil {
			return
		}
		s.mu.Lock()
		got := copyState(s.entries)
		s.mu.Unlock()
		s.Close()
		wantFile := append(appendHeader(nil), body[:p]...)
		if allZero(body[p:]) {
			wantFile = append(appendHeader(nil), body...) // preallocated space: kept
		}
		if kept, _ := os.ReadFile(path); !bytes.Equal(kept, wantFile) {
			t.Fatalf("recovered file is %d bytes, want %d", len(kept), len(wantFile))
		}
		sameState(t, got, want)
		s = mustOpen(t, dir, opts)
		defer s.Close()
		sameState(t, state(s), want)
	})
}

// TestDecodeMutatedLogs runs FuzzDecode's checks on mutations of a valid log in every test
// run (the fuzz engine is for longer searches): bit flips, cuts, splices and zeroed spans.
func TestDecodeMutatedLogs(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 11))
	fx := newLogFixture(rng, 12)
	orig := fx.data[headerSize:]
	for range 5000 {
		b := append([]byte(nil), orig...)
		switch rng.IntN(4) {
		case 0:
			for range 1 + rng.IntN(4) {
				b[rng.IntN(len(b))] ^= byte(1 << rng.IntN(8))
			}
		case 1:
			b = b[:rng.IntN(len(b))]
		case 2:
			i, j := rng.IntN(len(b)), rng.IntN(len(b))
			b = append(b[:min(i, j)], orig[max(i, j):]...)
		case 3:
			i := rng.IntN(len(b))
			clear(b[i:min(len(b), i+rng.IntN(64))])
		}
		p, _ := validPrefix(t, b)
		_ = validFrameAfter(b[p:])
	}
}
