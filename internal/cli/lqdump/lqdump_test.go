package lqdump

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lightq/lightq/internal/version"
	"github.com/lightq/lightq/log"
	"github.com/lightq/lightq/wire"
)

func TestDumpMain(t *testing.T) {
	dir := t.TempDir()
	l, err := log.Open(dir, log.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 3; i++ {
		b := makeBatch(rng, 4, 100, 1000)
		if _, err := l.Append(b, 4); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := Main([]string{dir}, &out, &errb); code != 0 {
		t.Fatalf("dump exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "00000000000000000000.log") {
		t.Fatalf("dump does not list the segment:\n%s", out.String())
	}
	out.Reset()
	if code := Main([]string{"-verify", dir}, &out, &errb); code != 0 || !strings.Contains(out.String(), "verified") {
		t.Fatalf("verify exit %d: %s %s", code, out.String(), errb.String())
	}
	// Flip a byte inside the second batch's records: verify reports it and exits 1.
	seg := filepath.Join(dir, "00000000000000000000.log")
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)-3] ^= 0xff
	if err := os.WriteFile(seg, data, 0o600); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if code := Main([]string{"-verify", dir}, &out, &errb); code != 1 || !strings.Contains(out.String(), seg) {
		t.Fatalf("verify of a corrupt segment: exit %d, output %q", code, out.String())
	}
	if code := Main(nil, &out, &errb); code != 2 {
		t.Fatalf("no args: exit %d", code)
	}
}

// makeBatch is a batch of n records with random values of valueSize/2..valueSize bytes and
// timestamps from ts on, as the log package's tests make them.
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

// TestVersion: -version prints the build's version line without a directory.
func TestVersion(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Main([]string{"-version"}, &out, &errb); code != 0 || out.String() != version.String("lqdump")+"\n" {
		t.Errorf("-version: exit %d, printed %q %q", code, out.String(), errb.String())
	}
}

// TestMaxBatchUnits: -max-batch takes a size with a unit, and a bad one is a usage error.
func TestMaxBatchUnits(t *testing.T) {
	dir := t.TempDir()
	l, err := log.Open(dir, log.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := Main([]string{"-max-batch", "4MiB", "-verify", dir}, &out, &errb); code != 0 {
		t.Errorf("-max-batch 4MiB: exit %d: %s", code, errb.String())
	}
	if code := Main([]string{"-max-batch", "4 MiB", dir}, &out, &errb); code != 2 {
		t.Errorf("-max-batch '4 MiB': exit %d, want 2", code)
	}
}

// TestDumpFormat2: a log holding both magics lists each batch, with the leader epoch, raft
// index, producer fields and control type of magic-2 batches.
func TestDumpFormat2(t *testing.T) {
	dir := t.TempDir()
	l, err := log.Open(dir, log.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	appendBatch := func(b []byte, n uint32) {
		t.Helper()
		if _, err := l.Append(b, n); err != nil {
			t.Fatal(err)
		}
	}
	appendBatch(makeBatch(rng, 2, 50, 1000), 2)
	for _, p := range []struct {
		id    int64
		epoch int16
		seq   int32
	}{{wire.NoProducer, wire.NoProducer, wire.NoProducer}, {7, 1, 0}} {
		var bb wire.BatchBuilder
		bb.SetMagic(wire.BatchMagic2)
		for i := range 3 {
			bb.Append(2000+int64(i), nil, []byte("v"), nil)
		}
		bb.SetProducer(p.id, p.epoch, p.seq)
		b, err := bb.Finish(wire.CodecNone, nil)
		if err != nil {
			t.Fatal(err)
		}
		appendBatch(append([]byte(nil), b...), 3)
	}
	// A replicated partition's entries without messages: control batches with a raft index.
	for i, c := range []struct {
		typ   uint8
		value []byte
	}{{wire.ControlEmptyEntry, nil}, {wire.ControlConfChange, []byte{8, 0, 16, 3}}} {
		b := wire.AppendControlBatch(nil, c.typ, c.value)
		wire.SetBatchLeaderEpoch(b, 4)
		wire.SetBatchRaftIndex(b, uint64(20+i))
		appendBatch(b, 1)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := Main([]string{dir}, &out, &errb); code != 0 {
		t.Fatalf("dump exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 6 || strings.Contains(lines[1], "magic=") ||
		!strings.Contains(lines[2], "offset=2 count=3") || !strings.Contains(lines[2], "magic=2 leader-epoch=0 producer=none ok") ||
		!strings.Contains(lines[3], "offset=5 count=3") || !strings.Contains(lines[3], "magic=2 leader-epoch=0 producer=7 epoch=1 seq=0-2 ok") ||
		!strings.Contains(lines[4], "offset=8 count=1") || !strings.HasSuffix(lines[4], "magic=2 leader-epoch=4 raft-index=20 producer=none control=empty-entry(0 bytes) ok") ||
		!strings.Contains(lines[5], "offset=9 count=1") || !strings.HasSuffix(lines[5], "raft-index=21 producer=none control=conf-change(4 bytes) ok") {
		t.Fatalf("dump:\n%s", out.String())
	}
	out.Reset()
	if code := Main([]string{"-verify", dir}, &out, &errb); code != 0 {
		t.Fatalf("verify of a log with control batches: exit %d: %s %s", code, out.String(), errb.String())
	}
}
