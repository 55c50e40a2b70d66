package partition

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"strings"
	"testing"
	"time"

	"github.com/lightq/lightq/log/producerstate"
	"github.com/lightq/lightq/log/vfs"
)

func sampleState(t testing.TB) (*producerstate.Table, []byte) {
	tb := producerstate.New(producerstate.Config{Expiry: time.Hour, MaxProducers: 100})
	for i := range 12 {
		h := hdr(int64(i%3), 0, int32(i/3*2), 2)
		tb.Record(&h, int64(i*2), 50)
	}
	return tb, appendState(nil, 77, []byte("log part"), tb, 24, 99)
}

func TestStateRoundTrip(t *testing.T) {
	tb, b := sampleState(t)
	index, logPart, loaded, err := loadState(b, producerstate.Config{Expiry: time.Hour, MaxProducers: 100})
	if err != nil {
		t.Fatal(err)
	}
	if index != 77 || string(logPart) != "log part" {
		t.Fatalf("index %d, log part %q", index, logPart)
	}
	if again := appendState(nil, index, logPart, loaded, 24, 99); !bytes.Equal(again, b) {
		t.Fatal("a loaded state encodes differently")
	}
	if a, b := tb.Producers(), loaded.Producers(); len(a) != 3 || len(a) != len(b) {
		t.Fatalf("%d producers loaded, want %d", len(b), len(a))
	}
	// The checkpoint file: absent, written, replaced.
	dir := t.TempDir()
	if got, err := readCheckpoint(vfs.OS, dir); got != nil || err != nil {
		t.Fatalf("no checkpoint: %q %v", got, err)
	}
	for _, want := range [][]byte{b, appendState(nil, 1, nil, tb, 0, 0)} {
		if err := writeCheckpoint(vfs.OS, dir, want); err != nil {
			t.Fatal(err)
		}
		if got, err := readCheckpoint(vfs.OS, dir); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("read back %d bytes (%v), wrote %d", len(got), err, len(want))
		}
	}
}

// fixStateCRC recomputes a mangled state's header CRC, so that the other checks are reached.
func fixStateCRC(b []byte) []byte {
	if len(b) >= stateHeaderSize {
		n := int(binary.BigEndian.Uint32(b[20:]))
		if end := stateHeaderSize + n; n >= 0 && end <= len(b) {
			binary.BigEndian.PutUint32(b[4:], crc32.Checksum(b[8:end], castagnoli))
		}
	}
	return b
}

func TestStateCorrupt(t *testing.T) {
	_, good := sampleState(t)
	tests := []struct {
		name   string
		mangle func([]byte) []byte
		fix    bool
		want   string
	}{
		{"empty", func(b []byte) []byte { return nil }, false, "shorter than its header"},
		{"header cut", func(b []byte) []byte { return b[:stateHeaderSize-1] }, false, "shorter than its header"},
		{"magic", func(b []byte) []byte { b[0] = 'X'; return b }, false, "magic"},
		{"version", func(b []byte) []byte { b[8] = 2; return b }, true, "version"},
		{"reserved", func(b []byte) []byte { b[11] = 1; return b }, true, "reserved"},
		{"log part past the end", func(b []byte) []byte { binary.BigEndian.PutUint32(b[20:], uint32(len(b))); return b }, false, "log part of"},
		{"log part too large", func(b []byte) []byte { binary.BigEndian.PutUint32(b[20:], maxLogPart+1); return b }, false, "log part of"},
		{"index flipped", func(b []byte) []byte { b[12] ^= 1; return b }, false, "CRC-32C mismatch"},
		{"log part flipped", func(b []byte) []byte { b[stateHeaderSize] ^= 1; return b }, false, "CRC-32C mismatch"},
		{"producer state flipped", func(b []byte) []byte { b[len(b)-1] ^= 1; return b }, false, "producer state snapshot invalid"},
		{"producer state cut", func(b []byte) []byte { return b[:len(b)-3] }, false, "producer state snapshot invalid"},
		{"no producer state", func(b []byte) []byte { return b[:stateHeaderSize+8] }, false, "producer state snapshot invalid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.mangle(bytes.Clone(good))
			if tt.fix {
				b = fixStateCRC(b)
			}
			_, _, tb, err := loadState(b, producerstate.Config{Expiry: time.Hour, MaxProducers: 100})
			if !errors.Is(err, ErrBadState) || !strings.Contains(err.Error(), tt.want) || tb != nil {
				t.Fatalf("loadState: %v, want ErrBadState saying %q", err, tt.want)
			}
		})
	}
}

// FuzzState: loadState never panics; what it accepts re-encodes to exactly its bytes.
func FuzzState(f *testing.F) {
	_, good := sampleState(f)
	f.Add(good, false)
	f.Add(appendState(nil, 0, nil, producerstate.New(producerstate.Config{Expiry: time.Hour, MaxProducers: 1}), 0, 0), false)
	f.Add([]byte("LQPT"), true)
	f.Fuzz(func(t *testing.T, b []byte, fix bool) {
		if fix {
			b = fixStateCRC(bytes.Clone(b))
		}
		index, logPart, tb, err := loadState(b, producerstate.Config{Expiry: time.Hour, MaxProducers: 1 << 20})
		if err != nil {
			if !errors.Is(err, ErrBadState) {
				t.Fatalf("refused with %v", err)
			}
			return
		}
		_, _, prod, _ := decodeState(b)
		info, _ := producerstate.New(producerstate.Config{Expiry: time.Hour, MaxProducers: 1 << 20}).LoadSnapshot(prod)
		if again := appendState(nil, index, logPart, tb, info.Offset, info.Written); !bytes.Equal(again, b) {
			t.Fatalf("re-encoded differently:\n% x\n% x", again, b)
		}
	})
}
