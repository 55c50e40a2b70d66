package partition

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lightq/lightq/wire"
)

// What the tests check on the replicas' logs once the cluster is quiet.

// stored is one record batch of a committed log.
type stored struct {
	base  int64
	pid   int64
	epoch int16
	seq   int32
	count uint32
	raw   []byte
}

type batchKey struct {
	pid   int64
	epoch int16
	seq   int32
}

// readRange reads the bytes of p's log for offsets [from, to) (batch-aligned).
func readRange(t testing.TB, p *Partition, from, to int64) []byte {
	t.Helper()
	l := p.Log()
	var out []byte
	for off := from; off < to; {
		c, err := l.Read(off, to, 1<<20)
		if err != nil {
			t.Fatalf("read offset %d of %s: %v", off, l.Dir(), err)
		}
		if c == nil {
			break
		}
		at := len(out)
		out = append(out, make([]byte, c.Len)...)
		_, err = c.File.ReadAt(out[at:], c.Pos)
		off = c.NextOffset
		c.Release()
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// committed returns the record batches of p's log below its high watermark (control batches
// skipped), each checked.
func committed(t testing.TB, p *Partition) []stored {
	t.Helper()
	b := readRange(t, p, p.Log().StartOffset(), p.HighWatermark())
	var out []stored
	for len(b) > 0 {
		n := wire.BatchSize(b)
		bt, err := wire.ParseBatch(b[:n], 1<<20)
		if err != nil {
			t.Fatalf("%s: batch at %d: %v", p.Log().Dir(), wire.BatchBaseOffset(b), err)
		}
		if bt.Magic != wire.BatchMagic2 {
			t.Fatalf("%s: batch at %d is format %d", p.Log().Dir(), bt.BaseOffset, bt.Magic)
		}
		if !bt.IsControl() {
			out = append(out, stored{base: bt.BaseOffset, pid: bt.ProducerID, epoch: bt.ProducerEpoch, seq: bt.BaseSequence, count: bt.RecordCount, raw: b[:n]})
		}
		b = b[n:]
	}
	return out
}

// logStatusIfFailed logs every live replica's status once the test has failed (deferred by
// the waits, so that a timeout says which replica is stuck where).
func (c *cluster) logStatusIfFailed() {
	if !c.t.Failed() {
		return
	}
	for _, id := range c.live() {
		if p := c.part(id); p != nil {
			c.t.Logf("node %d: %+v; catch-ups %+v", id, p.Status(), p.CatchUps())
		}
	}
}

// quiet waits until every running node has applied the same high watermark, which is the
// end of the leader's log (nothing uncommitted).
func (c *cluster) quiet() int64 {
	c.t.Helper()
	var hw int64
	defer c.logStatusIfFailed()
	waitFor(c.t, "every replica to apply the leader's whole log", func() bool {
		ids := c.live()
		var lead *Partition
		for _, id := range ids {
			if p := c.part(id); p != nil && p.Status().IsLeader {
				lead = p
			}
		}
		if lead == nil {
			return false
		}
		hw = lead.HighWatermark()
		if hw != lead.Log().NextOffset() {
			return false
		}
		for _, id := range ids {
			if p := c.part(id); p == nil || p.HighWatermark() != hw || p.Log().NextOffset() != hw {
				return false
			}
		}
		return true
	})
	return hw
}

// sameLogs checks that the running nodes' logs hold the same bytes for the offsets they
// share below the high watermark, and that the segment files they both hold are
// byte-identical (a snapshot's receiver starts later, and names its first segment by the
// snapshot's offset).
func (c *cluster) sameLogs(ids ...uint64) {
	c.t.Helper()
	ref := c.part(ids[0])
	for _, id := range ids[1:] {
		p := c.part(id)
		from := max(ref.Log().StartOffset(), p.Log().StartOffset())
		hw := ref.HighWatermark()
		if p.HighWatermark() != hw {
			c.t.Fatalf("node %d: high watermark %d, node %d's %d", id, p.HighWatermark(), ids[0], hw)
		}
		a, b := readRange(c.t, ref, from, hw), readRange(c.t, p, from, hw)
		if !bytes.Equal(a, b) {
			c.t.Fatalf("nodes %d and %d hold different bytes for offsets [%d, %d) (%d and %d bytes)", ids[0], id, from, hw, len(a), len(b))
		}
		// The segment files both hold (retention may be deleting old ones meanwhile).
		fa, fb := segmentFiles(c.t, ref.Log().Dir()), segmentFiles(c.t, p.Log().Dir())
		common := 0
		for name, x := range fa {
			if y, ok := fb[name]; ok {
				if !bytes.Equal(x, y) {
					c.t.Fatalf("segment %s differs between nodes %d and %d (%d and %d bytes)", name, ids[0], id, len(x), len(y))
				}
				common++
			}
		}
		if common == 0 {
			c.t.Fatalf("nodes %d and %d have no segment file in common", ids[0], id)
		}
		c.t.Logf("nodes %d and %d: offsets [%d, %d), %d bytes, byte-identical", ids[0], id, from, hw, len(a))
	}
}

func segmentFiles(t testing.TB, dir string) map[string][]byte {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".log") {
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if errors.Is(err, os.ErrNotExist) {
				continue // retention removed it since the listing
			}
			if err != nil {
				t.Fatal(err)
			}
			out[e.Name()] = b
		}
	}
	return out
}

// exactlyOnce checks p's committed log against what producers were told: every acked batch
// is there once, at the offset acked; no idempotent batch is there twice.
func exactlyOnce(t testing.TB, p *Partition, acked map[batchKey]int64) {
	t.Helper()
	seen := map[batchKey]int64{}
	for _, s := range committed(t, p) {
		if s.pid == wire.NoProducer {
			continue
		}
		k := batchKey{s.pid, s.epoch, s.seq}
		if at, dup := seen[k]; dup {
			t.Fatalf("%s: producer %d epoch %d sequence %d stored twice, at %d and %d", p.Log().Dir(), k.pid, k.epoch, k.seq, at, s.base)
		}
		seen[k] = s.base
	}
	for k, base := range acked {
		at, ok := seen[k]
		switch {
		case !ok:
			t.Fatalf("%s: acked batch of producer %d sequence %d (offset %d) lost", p.Log().Dir(), k.pid, k.seq, base)
		case at != base:
			t.Fatalf("%s: batch of producer %d sequence %d acked at %d, stored at %d", p.Log().Dir(), k.pid, k.seq, base, at)
		}
	}
}

// tables returns p's producer states without their last-seen times (each replica's own
// clock), for comparing replicas.
func tables(p *Partition) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var sb strings.Builder
	for _, s := range p.dd.table.Producers() {
		s.LastSeen = 0
		fmt.Fprintf(&sb, "%d/%d:%v ", s.ProducerID, s.Epoch, s.Batches)
	}
	return sb.String()
}
