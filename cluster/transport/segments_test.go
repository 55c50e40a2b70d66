package transport

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/lightq/lightq/log"
	"github.com/lightq/lightq/wire"
)

// segmentPair starts a listener serving l as group 7 and a dialer that knows it, the
// dialer's secret dialSecret.
func segmentPair(t testing.TB, l *log.Log, dialSecret []byte) *Transport {
	t.Helper()
	srv, err := New(Config{NodeID: 1, Listen: "127.0.0.1:0", Secret: testSecret, Handler: func(uint64, []Envelope) {},
		Segments: func(g uint64) SegmentSource {
			if g == 7 {
				return l
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	cli, err := New(Config{NodeID: 2, Secret: dialSecret, Handler: func(uint64, []Envelope) {}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	cli.SetPeer(1, srv.Addr().String())
	return cli
}

func testLog(t *testing.T) *log.Log {
	t.Helper()
	l, err := log.Open(t.TempDir(), log.Options{SegmentBytes: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	for i := range 200 {
		var bb wire.BatchBuilder
		bb.SetMagic(wire.BatchMagic2)
		bb.Append(1_700_000_000_000, nil, bytes.Repeat([]byte{byte(i)}, 100), nil)
		b, err := bb.Finish(wire.CodecNone, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Append(bytes.Clone(b), 1); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

// TestFetchSegments: the stream gives the segment files' bytes in order, from the start of
// the segment holding the offset asked for; a wrong secret, an unknown group and an offset
// below the log are refused.
func TestFetchSegments(t *testing.T) {
	l := testLog(t)
	cli := segmentPair(t, l, testSecret)
	ctx := context.Background()
	files := map[int64][]byte{}
	var got, read int
	end, err := cli.FetchSegments(ctx, 1, 7, 5, l.NextOffset(), true, func(base, pos int64, data []byte) error {
		if int64(len(files[base])) != pos {
			t.Fatalf("segment %d: bytes at %d after %d", base, pos, len(files[base]))
		}
		files[base] = append(files[base], data...)
		got += len(data)
		return nil
	}, func(n int) { read += n })
	if err != nil || end != l.NextOffset() {
		t.Fatalf("FetchSegments: %d, %v", end, err)
	}
	if read < got+segHeaderSize {
		t.Fatalf("progress reported %d bytes read, the sink got %d", read, got)
	}
	if _, ok := files[0]; !ok {
		t.Fatalf("round down from offset 5 did not start at segment 0: %d segments", len(files))
	}
	for base, b := range files {
		ch, err := l.Read(base, l.NextOffset(), 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]byte, ch.Len)
		_, _ = ch.File.ReadAt(want, ch.Pos)
		ch.Release()
		if !bytes.Equal(b, want) {
			t.Fatalf("segment %d: %d bytes, want %d", base, len(b), len(want))
		}
	}
	var se *SegmentError
	if _, err := cli.FetchSegments(ctx, 1, 8, 0, 10, true, nil, nil); !errors.As(err, &se) || se.Code != SegNoGroup {
		t.Fatalf("unknown group: %v", err)
	}
	if _, err := cli.FetchSegments(ctx, 1, 7, l.NextOffset()+5, l.NextOffset()+9, false, nil, nil); !errors.As(err, &se) || se.Code != SegBadRequest {
		t.Fatalf("past the log: %v", err)
	}
	bad := segmentPair(t, l, []byte("not the cluster secret at all"))
	if _, err := bad.FetchSegments(ctx, 1, 7, 0, 10, true, nil, nil); !errors.Is(err, ErrAuth) {
		t.Fatalf("wrong secret: %v", err)
	}
	cctx, cancel := context.WithTimeout(ctx, time.Millisecond)
	defer cancel()
	<-cctx.Done()
	if _, err := cli.FetchSegments(cctx, 1, 7, 0, l.NextOffset(), true, func(int64, int64, []byte) error { return nil }, nil); err == nil {
		t.Fatal("a cancelled fetch succeeded")
	}
}

// FuzzSegmentFrame: the decoders of segment requests and frame headers refuse with
// ErrBadFrame or accept what re-encodes to itself.
func FuzzSegmentFrame(f *testing.F) {
	f.Add(appendSegRequest(nil, segRequest{group: 3, from: 10, to: 900, roundDown: true}))
	var h [segHeaderSize]byte
	putSegHeader(h[:], segHeader{kind: segKindData, length: 4096, a: 100, b: 8192})
	f.Add(h[:])
	putSegHeader(h[:], segHeader{kind: segKindError, length: 12, a: SegGone, b: 55})
	f.Add(h[:])
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == segRequestSize {
			if b[31]&1 == 1 { // give the CRC a chance
				binary.BigEndian.PutUint32(b, checksum(b[4:]))
			}
			r, err := decodeSegRequest(b)
			switch {
			case err != nil && !errors.Is(err, ErrBadFrame):
				t.Fatalf("error %v does not wrap ErrBadFrame", err)
			case err == nil && !bytes.Equal(appendSegRequest(nil, r), b):
				t.Fatalf("request %x re-encodes differently", b)
			}
		}
		if len(b) == segHeaderSize {
			if b[23]&1 == 1 {
				binary.BigEndian.PutUint32(b[24:], checksum(b[:24]))
			}
			h, err := decodeSegHeader(b)
			switch {
			case err != nil && !errors.Is(err, ErrBadFrame):
				t.Fatalf("error %v does not wrap ErrBadFrame", err)
			case err == nil:
				var again [segHeaderSize]byte
				putSegHeader(again[:], h)
				if !bytes.Equal(again[:], b) {
					t.Fatalf("header %x re-encodes as %x", b, again)
				}
				if h.kind == segKindData && (h.length == 0 || h.length > MaxSegmentChunk) {
					t.Fatalf("data frame of %d bytes accepted", h.length)
				}
			}
		}
	})
}

// BenchmarkFetchSegments: a whole 32 MiB log over a segment stream on loopback (sendfile on
// Linux), the sink discarding.
func BenchmarkFetchSegments(b *testing.B) {
	l, err := log.Open(b.TempDir(), log.Options{SegmentBytes: 8 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	var bb wire.BatchBuilder
	bb.SetMagic(wire.BatchMagic2)
	for range 64 {
		bb.Append(1_700_000_000_000, nil, bytes.Repeat([]byte{'x'}, 1000), nil)
	}
	batch, err := bb.Finish(wire.CodecNone, nil)
	if err != nil {
		b.Fatal(err)
	}
	for l.Size() < 32<<20 {
		if _, err := l.Append(bytes.Clone(batch), 64); err != nil {
			b.Fatal(err)
		}
	}
	cli := segmentPair(b, l, testSecret)
	b.SetBytes(l.Size())
	b.ReportAllocs()
	for b.Loop() {
		if _, err := cli.FetchSegments(context.Background(), 1, 7, 0, l.NextOffset(), true, func(int64, int64, []byte) error { return nil }, nil); err != nil {
			b.Fatal(err)
		}
	}
}
