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

// FuzzRecover: arbitrary bytes after a valid header as the offsets log. Decoding never
// panics; the valid prefix re-encodes to the same bytes frame by frame; Open either fails
// with ErrCorrupt exactly when a valid frame follows the damage, or yields the
// last-write-wins state of the valid prefix, with the file cut to it (unless only zeros,
// preallocated space, follow it), and the same state
// again after a reopen (recovery is idempotent).
func FuzzRecover(f *testing.F) {
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
	f.Fuzz(func(t *testing.T, body []byte) {
		// Re-encode the valid prefix frame by frame from what decoding yields.
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
