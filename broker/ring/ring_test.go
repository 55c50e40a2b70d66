package ring

import (
	"bytes"
	"encoding/binary"
	"math/rand"
	"runtime"
	"sync"
	"testing"

	"github.com/lightq/lightq/wire"
)

// makeBatch builds a valid batch of count records whose values encode (tag, i).
func makeBatch(t testing.TB, tag uint64, count, valueSize int) []byte {
	var b wire.BatchBuilder
	v := make([]byte, valueSize)
	for i := 0; i < count; i++ {
		binary.BigEndian.PutUint64(v, tag)
		binary.BigEndian.PutUint32(v[8:], uint32(i))
		b.Append(1000, nil, v, nil)
	}
	out, err := b.Finish(wire.CodecNone, nil)
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte(nil), out...)
}

func TestAppendAcquireOrder(t *testing.T) {
	r := New(64<<10, 16)
	var want [][]byte
	for i := 0; i < 10; i++ {
		b := makeBatch(t, uint64(i), 3, 20)
		first, err := r.Append(b, 3)
		if err != nil {
			t.Fatal(err)
		}
		if first != uint64(i*3) {
			t.Fatalf("batch %d first msg %d, want %d", i, first, i*3)
		}
		want = append(want, b)
	}
	for seq := uint64(0); seq < 10; seq++ {
		v, ok := r.Acquire(seq)
		if !ok || v.Seq != seq {
			t.Fatalf("acquire %d: ok=%v seq=%d", seq, ok, v.Seq)
		}
		bt, err := wire.ParseBatch(v.Data, 1<<20)
		if err != nil {
			t.Fatalf("batch %d corrupt in ring: %v", seq, err)
		}
		if bt.BaseOffset != int64(seq*3) {
			t.Fatalf("base offset %d, want %d", bt.BaseOffset, seq*3)
		}
		if !bytes.Equal(v.Data[8:], want[seq][8:]) {
			t.Fatalf("batch %d bytes differ", seq)
		}
		r.Release(v)
	}
	if _, ok := r.Acquire(10); ok {
		t.Fatal("acquired a batch that does not exist yet")
	}
}

func TestEvictionBySlotsAndBytes(t *testing.T) {
	cases := []struct {
		name       string
		arena      int
		slots      int
		batchBytes int
	}{
		{"slots-bound", 1 << 20, 4, 100},
		{"bytes-bound", 8 << 10, 1024, 900},
		{"odd-sizes", 10000, 64, 1333},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := New(tc.arena, tc.slots)
			for i := 0; i < 200; i++ {
				if _, err := r.Append(makeBatch(t, uint64(i), 1, tc.batchBytes), 1); err != nil {
					t.Fatal(err)
				}
				// Every batch still held must be intact.
				for seq := r.tail.Load(); seq < r.head.Load(); seq++ {
					v, ok := r.Acquire(seq)
					if !ok {
						t.Fatalf("held batch %d not acquirable", seq)
					}
					if _, err := wire.ParseBatch(v.Data, 1<<20); err != nil {
						t.Fatalf("after append %d, batch %d corrupt: %v", i, v.Seq, err)
					}
					if got := binary.BigEndian.Uint64(recordValue(t, v.Data)); got != v.Seq {
						t.Fatalf("batch %d holds tag %d", v.Seq, got)
					}
					r.Release(v)
				}
			}
			oldest, next := r.Messages()
			if next != 200 || oldest == 0 || oldest >= next {
				t.Fatalf("messages oldest=%d next=%d", oldest, next)
			}
			// A reader far behind is moved to the oldest batch.
			v, ok := r.Acquire(0)
			if !ok || v.Seq != r.tail.Load() || v.FirstMsg != oldest {
				t.Fatalf("lagging reader got seq %d firstMsg %d, want tail %d oldest %d", v.Seq, v.FirstMsg, r.tail.Load(), oldest)
			}
			r.Release(v)
		})
	}
}

func recordValue(t testing.TB, batch []byte) []byte {
	bt, err := wire.ParseBatch(batch, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	it := wire.NewRecordIter(bt.Records, bt.RecordCount, bt.BaseOffset, bt.FirstTimestamp)
	var rec wire.Record
	if !it.Next(&rec) {
		t.Fatal(it.Err())
	}
	return rec.Value
}

func TestTooLarge(t *testing.T) {
	r := New(4096, 8)
	if _, err := r.Append(make([]byte, 2049), 1); err == nil {
		t.Fatal("accepted a batch over half the arena")
	}
}

// TestConcurrentReaders runs writers and readers at once (run with -race): readers must only
// ever see whole, valid batches, in increasing order, and account for every message either as
// read or as dropped.
func TestConcurrentReaders(t *testing.T) {
	r := New(32<<10, 32)
	const batches = 3000
	var wg sync.WaitGroup
	done := make(chan struct{})
	for reader := 0; reader < 3; reader++ {
		wg.Add(1)
		go func(slow bool) {
			defer wg.Done()
			var seq, nextMsg, read, dropped uint64
			for {
				v, ok := r.Acquire(seq)
				if !ok {
					select {
					case <-done:
						if seq >= r.Head() {
							if read+dropped != nextMsg {
								t.Errorf("read %d + dropped %d != %d", read, dropped, nextMsg)
							}
							return
						}
					default:
					}
					continue
				}
				if v.FirstMsg < nextMsg {
					t.Errorf("went backwards: first %d < next %d", v.FirstMsg, nextMsg)
				}
				dropped += v.FirstMsg - nextMsg
				if _, err := wire.ParseBatch(v.Data, 1<<20); err != nil {
					t.Errorf("torn batch %d: %v", v.Seq, err)
				}
				read += uint64(v.Count)
				nextMsg = v.FirstMsg + uint64(v.Count)
				seq = v.Seq + 1
				r.Release(v)
				if slow && rand.Intn(4) == 0 {
					for i := 0; i < 1000; i++ {
						_ = i * i
					}
				}
			}
		}(reader == 2)
	}
	batchesByCount := [][]byte{makeBatch(t, 1, 1, 50), makeBatch(t, 2, 5, 300), makeBatch(t, 3, 2, 2000)}
	for i := 0; i < batches; i++ {
		c := i % 3
		if _, err := r.Append(batchesByCount[c], uint32([]int{1, 5, 2}[c])); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	wg.Wait()
}

func BenchmarkAppendAcquire(b *testing.B) {
	r := New(8<<20, 1024)
	batch := makeBatch(b, 1, 500, 100)
	b.SetBytes(int64(len(batch)))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := r.Append(batch, 500); err != nil {
			b.Fatal(err)
		}
		v, ok := r.Acquire(uint64(i))
		if !ok {
			b.Fatal("missing")
		}
		r.Release(v)
	}
}

// TestReserveCommitAbort: an aborted reservation publishes nothing and takes no sequence
// numbers; a committed one is a batch like an appended one; Reserve refuses what Append does.
func TestReserveCommitAbort(t *testing.T) {
	r := New(64<<10, 16)
	if _, err := r.Append(makeBatch(t, 1, 3, 20), 3); err != nil {
		t.Fatal(err)
	}
	good := makeBatch(t, 2, 4, 20)
	dst, err := r.Reserve(len(good))
	if err != nil {
		t.Fatal(err)
	}
	copy(dst, good)
	r.Abort()
	if _, ok := r.Acquire(1); ok {
		t.Fatal("an aborted batch is visible")
	}
	if oldest, next := r.Messages(); oldest != 0 || next != 3 {
		t.Fatalf("messages %d..%d after an abort, want 0..3", oldest, next)
	}
	dst, err = r.Reserve(len(good))
	if err != nil {
		t.Fatal(err)
	}
	copy(dst, good)
	if first := r.Commit(4); first != 3 {
		t.Fatalf("committed batch starts at message %d, want 3", first)
	}
	v, ok := r.Acquire(1)
	if !ok || v.FirstMsg != 3 || v.Count != 4 {
		t.Fatalf("acquire 1: ok %v first %d count %d", ok, v.FirstMsg, v.Count)
	}
	bt, err := wire.ParseBatch(v.Data, 1<<20)
	if err != nil || bt.BaseOffset != 3 || !bytes.Equal(v.Data[8:], good[8:]) {
		t.Fatalf("committed batch: base %d, err %v", bt.BaseOffset, err)
	}
	r.Release(v)
	if _, err := r.Reserve(r.MaxBatch() + 1); err == nil {
		t.Fatal("Reserve took more than MaxBatch")
	}
	if _, err := r.Append(makeBatch(t, 3, 1, 20), 1); err != nil { // the ring is not left locked
		t.Fatal(err)
	}
}

// TestMemoryIsWhatNewAllocates: Memory, which the broker counts against its ring-memory cap,
// matches the heap New takes, slot index included (a page of slack for the allocator's
// size classes and the Ring struct).
func TestMemoryIsWhatNewAllocates(t *testing.T) {
	for _, tc := range []struct{ arena, slots int }{{1 << 20, 1000}, {2 << 20, 1 << 16}, {64 << 10, 3}} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		r := New(tc.arena, tc.slots)
		runtime.ReadMemStats(&after)
		got := int64(after.TotalAlloc - before.TotalAlloc)
		want := Memory(tc.arena, tc.slots)
		if r.Memory() != want {
			t.Errorf("New(%d, %d).Memory() = %d, Memory = %d", tc.arena, tc.slots, r.Memory(), want)
		}
		if got < want || got > want+16<<10 {
			t.Errorf("New(%d, %d) allocated %d bytes; Memory says %d", tc.arena, tc.slots, got, want)
		}
		runtime.KeepAlive(r)
	}
	if got := Memory(0, 1<<19+1); got != 1<<20*SlotBytes {
		t.Errorf("Memory(0, 2^19+1) = %d, want 2^20 slots of %d bytes: slots round up to a power of two", got, SlotBytes)
	}
}
