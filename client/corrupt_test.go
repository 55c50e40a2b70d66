package client_test

// Batches the client cannot decode: written into a stopped broker's log (a PRODUCE that checks
// records would refuse them), or damaged there as a faulty disk would, then consumed after a
// restart. And FETCH answers and DELIVERs from the fake broker that a real one does not send.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lightq/lightq/broker/brokertest"
	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/internal/poisontest"
	"github.com/lightq/lightq/log"
	"github.com/lightq/lightq/wire"
)

// poisonBroker starts a broker with a durable topic "dur" of one partition, stops it, lets
// write change the partition's log directory, and starts it again on the same data directory.
// It returns a connection as the topic's user.
func poisonBroker(t *testing.T, write func(dir string)) *client.Conn {
	t.Helper()
	cfg := brokertest.Config(t)
	cfg.AdminUser, cfg.AdminPassword = itAdminUser, itAdminPass
	srv := brokertest.StartWith(t, cfg)
	admin := itDial(t, srv.Addr(), itAdminUser, itAdminPass)
	ckDurable(t, admin, "dur", 1)
	admin.Close()
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	write(poisontest.PartitionDir(cfg.DataDir, "dur", 0))
	srv = brokertest.StartWith(t, cfg)
	return itDial(t, srv.Addr(), itUser, itPass)
}

// poisonLog is a partition log of good and undecodable batches, as appended.
type poisonLog struct {
	batches [][]byte
	damaged []bool // to be damaged on disk after appending: none of it decodes
	bases   []int64
	end     int64 // offset after the last batch
}

func (pl *poisonLog) add(b []byte, damaged bool) {
	pl.batches, pl.damaged = append(pl.batches, b), append(pl.damaged, damaged)
}

// expect returns what a consumer that skips what it cannot decode delivers, in order: the
// offsets and values of the records that decode (those of a batch whose records stop decoding
// part-way included), and the offset ranges it skips.
func (pl *poisonLog) expect() (offsets []int64, values []string, skipped [][2]int64) {
	var comp wire.Compressor
	defer comp.Close()
	for i, b := range pl.batches {
		r := pl.badRange(i)
		bt, err := wire.ParseBatch(b, 1<<20)
		if err != nil {
			panic(err)
		}
		records := bt.Records
		if bt.Codec() != wire.CodecNone {
			records, err = comp.Decompress(nil, &bt)
		}
		if pl.damaged[i] || err != nil {
			skipped = append(skipped, r)
			continue
		}
		it := wire.NewRecordIter(records, bt.RecordCount, pl.bases[i], bt.FirstTimestamp)
		var rec wire.Record
		for it.Next(&rec) {
			offsets, values = append(offsets, rec.Offset), append(values, string(rec.Value))
			r[0] = rec.Offset + 1
		}
		if it.Err() != nil {
			skipped = append(skipped, r)
		}
	}
	return offsets, values, skipped
}

// badRange is the offset range of the i-th batch.
func (pl *poisonLog) badRange(i int) [2]int64 {
	next := pl.end
	if i+1 < len(pl.bases) {
		next = pl.bases[i+1]
	}
	return [2]int64{pl.bases[i], next - 1}
}

// appendTo appends the batches to the log in dir.
func (pl *poisonLog) appendTo(t *testing.T, dir string, opts log.Options) {
	pl.bases = poisontest.Append(t, dir, opts, pl.batches...)
	last := len(pl.batches) - 1
	pl.end = pl.bases[last] + int64(wire.PeekBatchHeaderUnchecked(pl.batches[last]).RecordCount)
}

// eachUntil consumes k until n records arrived, and returns them as offset/value pairs.
func eachUntil(t *testing.T, k *client.Consumer, n int) (offsets []int64, values []string, err error) {
	t.Helper()
	if n == 0 {
		return nil, nil, nil
	}
	err = k.Each(itCtx(t), func(m *client.Received) error {
		offsets, values = append(offsets, m.Offset), append(values, string(m.Value))
		if len(offsets) == n {
			return errItDone
		}
		return nil
	})
	if errors.Is(err, errItDone) {
		err = nil
	}
	return offsets, values, err
}

// skipRecorder is an OnCorruptBatch that skips and records what it was given.
type skipRecorder struct{ got []*client.CorruptBatchError }

func (s *skipRecorder) skip(e *client.CorruptBatchError) error {
	s.got = append(s.got, e)
	return nil
}

// TestConsumerPoisonBatches: batches whose CRC and header are right but whose records do not
// decode, stored in the log (as a broker that did not check records stored them). With the
// default policy the consumer stops at the first, naming the offsets it cannot deliver,
// having delivered everything before them (the records of the batch before its damage
// included); with OnCorruptBatch skipping, every decodable record is delivered exactly once,
// each bad batch is reported once in order, the group commit covers the skipped batches, and
// nothing is fetched forever. Whole answers (the batch after a bad one gives its extent) and
// one batch per FETCH (the header's record count does) are both covered.
func TestConsumerPoisonBatches(t *testing.T) {
	t.Parallel()
	var pl poisonLog
	pl.add(poisontest.Batch(1000, "a0", "a1", "a2"), false)
	pl.add(poisontest.CountMismatch(), false)
	pl.add(poisontest.Batch(2000, "b0", "b1"), false)
	pl.add(poisontest.GarbageRecords(), false)
	pl.add(poisontest.KeyPastRecord(), false)
	pl.add(poisontest.Batch(3000, "c0", "c1"), false)
	pl.add(poisontest.ZstdGarbage(), false) // the last batch of the log
	c := poisonBroker(t, func(dir string) { pl.appendTo(t, dir, log.Options{}) })
	wantOffsets, wantValues, wantSkipped := pl.expect()
	if len(wantSkipped) != 4 || !slices.Contains(wantValues, "count-2") {
		t.Fatalf("the model expects %v skipped, %q delivered", wantSkipped, wantValues)
	}
	causes := []string{"truncated varint", "varint overflows", "key", "zstd"}

	t.Run("stop", func(t *testing.T) {
		k := ckConsumer(t, c, client.ConsumerOptions{Topic: "dur"})
		offsets, _, err := eachUntil(t, k, len(wantOffsets))
		var bad *client.CorruptBatchError
		if !errors.As(err, &bad) || !errors.Is(err, wire.ErrCorruptBatch) {
			t.Fatalf("Each: %v, want a *CorruptBatchError", err)
		}
		r := wantSkipped[0] // the third record of the batch whose header says 3 but holds 2
		if bad.Topic != "dur" || bad.Partition != 0 || bad.FirstOffset != r[0] || bad.LastOffset != r[1] || !bad.Skippable() {
			t.Fatalf("error %+v, want dur/0 offsets %d-%d", bad, r[0], r[1])
		}
		want := fmt.Sprintf("lightq: topic dur partition 0 offsets %d-%d: cannot decode batch: ", r[0], r[1])
		if !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "truncated varint") {
			t.Fatalf("error text %q, want %q...", err, want)
		}
		if !slices.Equal(offsets, wantOffsets[:5]) {
			t.Fatalf("delivered %v before the error, want %v", offsets, wantOffsets[:5])
		}
		if k.Position(0) != r[0] || !errors.Is(k.Err(), wire.ErrCorruptBatch) {
			t.Fatalf("position %d (want %d), Err %v", k.Position(0), r[0], k.Err())
		}
		if err := k.Each(itCtx(t), func(*client.Received) error { return nil }); err != error(bad) {
			t.Fatalf("Each again: %v", err)
		}
	})

	for _, maxBytes := range []int{0, 1} {
		t.Run(fmt.Sprintf("skip/maxbytes=%d", maxBytes), func(t *testing.T) {
			group := fmt.Sprintf("g%d", maxBytes)
			var rec skipRecorder
			opts := client.ConsumerOptions{Topic: "dur", Group: group, AutoCommit: -1, MaxBytes: maxBytes, OnCorruptBatch: rec.skip}
			k := ckConsumer(t, c, opts)
			offsets, values, err := eachUntil(t, k, len(wantOffsets))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(offsets, wantOffsets) || !slices.Equal(values, wantValues) {
				t.Fatalf("got %v %q, want %v %q", offsets, values, wantOffsets, wantValues)
			}
			// The last batch is a bad one: the position reaches the end once Each skips it.
			eachUntilPosition(t, k, pl.end)
			ckNoMore(t, k)
			var got [][2]int64
			for i, e := range rec.got {
				got = append(got, [2]int64{e.FirstOffset, e.LastOffset})
				if !strings.Contains(e.Error(), causes[i]) || !errors.Is(e, wire.ErrCorruptBatch) {
					t.Errorf("skip %d: %v, want %q", i, e, causes[i])
				}
			}
			if !slices.Equal(got, wantSkipped) {
				t.Fatalf("skipped %v, want %v", got, wantSkipped)
			}
			if err := k.Commit(itCtx(t)); err != nil {
				t.Fatal(err)
			}
			off, err := c.FetchCommitted(itCtx(t), wire.FetchCommitted{Group: group, Topic: "dur"})
			if err != nil || off != pl.end {
				t.Fatalf("committed %d (%v), want %d", off, err, pl.end)
			}
			k.Close() // leaves the group (AutoCommit -1: commits nothing more)
			k2 := ckConsumer(t, c, client.ConsumerOptions{Topic: "dur", Group: group, AutoCommit: -1})
			if k2.Position(0) != pl.end {
				t.Fatalf("the group resumes at %d, want %d", k2.Position(0), pl.end)
			}
		})
	}

	t.Run("skip/messages", func(t *testing.T) {
		var rec skipRecorder
		k := ckConsumer(t, c, client.ConsumerOptions{Topic: "dur", OnCorruptBatch: rec.skip})
		var offsets []int64
		for m := range k.Messages() {
			offsets = append(offsets, m.Offset)
			if len(offsets) == len(wantOffsets) {
				break
			}
		}
		if !slices.Equal(offsets, wantOffsets) {
			t.Fatalf("got %v, want %v", offsets, wantOffsets)
		}
	})

	t.Run("stop by OnCorruptBatch", func(t *testing.T) {
		errMine := errors.New("no thanks")
		k := ckConsumer(t, c, client.ConsumerOptions{Topic: "dur", Start: client.AtOffset(pl.bases[2]),
			OnCorruptBatch: func(*client.CorruptBatchError) error { return errMine }})
		_, values, err := eachUntil(t, k, len(wantOffsets))
		if err != errMine || !slices.Equal(values, []string{"b0", "b1"}) || k.Position(0) != pl.bases[3] {
			t.Fatalf("Each: %v after %q at position %d", err, values, k.Position(0))
		}
	})

	t.Run("BatchIter", func(t *testing.T) {
		bases, skipped := fetchAll(t, c, 0)
		if want := []int64{pl.bases[0], pl.bases[2], pl.bases[5]}; !slices.Equal(bases, want) {
			t.Fatalf("good batches at %v, want %v", bases, want)
		}
		if want := [][2]int64{pl.badRange(1), pl.badRange(3), pl.badRange(4), pl.badRange(6)}; !slices.Equal(skipped, want) {
			t.Fatalf("skipped %v, want %v", skipped, want)
		}
	})
}

// eachUntilPosition runs Each on k until its partition 0 reaches pos; no record may arrive.
func eachUntilPosition(t *testing.T, k *client.Consumer, pos int64) {
	t.Helper()
	itEventually(t, fmt.Sprintf("position %d", pos), func() bool {
		ctx, cancel := context.WithTimeout(itCtx(t), 20*time.Millisecond)
		defer cancel()
		err := k.Each(ctx, func(m *client.Received) error { return fmt.Errorf("record at offset %d", m.Offset) })
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatal(err)
		}
		return k.Position(0) == pos
	})
}

// fetchAll reads partition 0 of "dur" from offset from with FETCH and BatchIter, skipping
// what does not decode; it returns the base offsets of the good batches and the offset
// ranges of the bad ones.
func fetchAll(t *testing.T, c *client.Conn, from int64) (bases []int64, skipped [][2]int64) {
	t.Helper()
	var comp wire.Compressor
	defer comp.Close()
	var buf []byte
	for off := from; ; {
		res, err := c.Fetch(itCtx(t), wire.Fetch{Topic: "dur", Offset: off, MaxBytes: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		if off >= res.HighWatermark {
			return bases, skipped
		}
		it := res.Iter()
		for {
			for it.Next() {
				off = it.Batch().NextOffset()
				_, err := it.Records(&comp, buf)
				var bad *client.CorruptBatchError
				if errors.As(err, &bad) {
					skipped = append(skipped, [2]int64{bad.FirstOffset, bad.LastOffset})
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				bases = append(bases, it.Batch().BaseOffset)
			}
			var bad *client.CorruptBatchError
			if !errors.As(it.Err(), &bad) {
				break
			}
			skipped = append(skipped, [2]int64{bad.FirstOffset, bad.LastOffset})
			off = bad.LastOffset + 1
			if !it.SkipCorrupt() {
				t.Fatalf("cannot skip %v", bad)
			}
		}
		if it.Err() != nil || it.SkipCorrupt() {
			t.Fatalf("Err %v at the end", it.Err())
		}
	}
}

// TestConsumerFaultyDiskSealed: bytes of stored batches changed by a faulty disk, in sealed
// segments (which the broker's recovery does not check batch by batch: it walks their
// headers): one with a flipped byte in its records (CRC mismatch), one with a damaged magic
// (its header fails its checks; the length field still frames it). The broker serves them;
// the consumer stops at the first or skips both. Each batch has a segment of its own, so each
// bad batch is the last of its FETCH answer and its extent comes from its header.
func TestConsumerFaultyDiskSealed(t *testing.T) {
	t.Parallel()
	var pl poisonLog
	pl.add(poisontest.Batch(1000, "a0", "a1"), false)
	pl.add(poisontest.Batch(2000, "crc0", "crc1", "crc2"), true)
	pl.add(poisontest.Batch(3000, "b0"), false)
	pl.add(poisontest.Batch(4000, "magic0", "magic1"), true)
	pl.add(poisontest.Batch(5000, "c0", "c1"), false) // the active segment
	c := poisonBroker(t, func(dir string) {
		pl.appendTo(t, dir, log.Options{SegmentBytes: 1})
		poisontest.Damage(t, dir, pl.bases[1], poisontest.FlipRecordsByte)
		poisontest.Damage(t, dir, pl.bases[3], poisontest.BreakMagic)
	})
	wantOffsets, wantValues, _ := pl.expect()

	k := ckConsumer(t, c, client.ConsumerOptions{Topic: "dur"})
	offsets, _, err := eachUntil(t, k, len(wantOffsets))
	var bad *client.CorruptBatchError
	if !errors.As(err, &bad) || bad.FirstOffset != pl.bases[1] || bad.LastOffset != pl.bases[2]-1 || !strings.Contains(err.Error(), "CRC-32C mismatch") {
		t.Fatalf("Each: %v, want a CRC mismatch at offsets %v", err, pl.badRange(1))
	}
	if !slices.Equal(offsets, wantOffsets[:2]) {
		t.Fatalf("delivered %v before the error", offsets)
	}

	var rec skipRecorder
	k = ckConsumer(t, c, client.ConsumerOptions{Topic: "dur", OnCorruptBatch: rec.skip})
	offsets, values, err := eachUntil(t, k, len(wantOffsets))
	if err != nil || !slices.Equal(offsets, wantOffsets) || !slices.Equal(values, wantValues) {
		t.Fatalf("got %v %q (%v), want %v %q", offsets, values, err, wantOffsets, wantValues)
	}
	if len(rec.got) != 2 || rec.got[0].FirstOffset != pl.bases[1] || rec.got[1].FirstOffset != pl.bases[3] || rec.got[1].LastOffset != pl.bases[4]-1 ||
		!strings.Contains(rec.got[1].Error(), "magic") {
		t.Fatalf("skipped %v", rec.got)
	}
	ckNoMore(t, k)

	// Started inside the bad batch (a commit can be anywhere): the rest of it is reported.
	rec.got = nil
	k = ckConsumer(t, c, client.ConsumerOptions{Topic: "dur", Start: client.AtOffset(pl.bases[1] + 1), OnCorruptBatch: rec.skip})
	if offsets, _, err = eachUntil(t, k, 1); err != nil || offsets[0] != pl.bases[2] {
		t.Fatalf("from inside the bad batch: %v (%v)", offsets, err)
	}
	if len(rec.got) != 1 || rec.got[0].FirstOffset != pl.bases[1]+1 || rec.got[0].LastOffset != pl.bases[2]-1 {
		t.Fatalf("from inside the bad batch: skipped %v", rec.got)
	}

	bases, skipped := fetchAll(t, c, 0)
	if want := []int64{pl.bases[0], pl.bases[2], pl.bases[4]}; !slices.Equal(bases, want) {
		t.Fatalf("BatchIter: good batches at %v, want %v", bases, want)
	}
	if want := [][2]int64{pl.badRange(1), pl.badRange(3)}; !slices.Equal(skipped, want) {
		t.Fatalf("BatchIter: skipped %v, want %v", skipped, want)
	}
}

// TestConsumerFaultyDiskLength: a batch whose length field a faulty disk changed, in a sealed
// segment. The broker reads its log by the length fields, so it cannot send that batch, nor
// tell where the next one starts: it answers STORAGE_ERROR naming the partition for every
// FETCH that has to walk through the batch. The consumer delivers what comes before, and
// reports each retry to OnError: it waits for the partition to be repaired, loudly. There
// is no batch to skip on the client's side.
func TestConsumerFaultyDiskLength(t *testing.T) {
	t.Parallel()
	var pl poisonLog
	pl.add(poisontest.Batch(1000, "a0", "a1"), false)
	pl.add(poisontest.Batch(2000, "len0", "len1"), true)
	pl.add(poisontest.Batch(3000, "b0"), false) // the active segment
	c := poisonBroker(t, func(dir string) {
		pl.appendTo(t, dir, log.Options{SegmentBytes: 1})
		poisontest.Damage(t, dir, pl.bases[1], poisontest.BreakLength)
	})
	errs := make(chan error, 64)
	var rec skipRecorder
	k := ckConsumer(t, c, client.ConsumerOptions{Topic: "dur", OnCorruptBatch: rec.skip, OnError: func(err error) { errs <- err }})
	offsets, _, err := eachUntil(t, k, 2)
	if err != nil || !slices.Equal(offsets, []int64{0, 1}) {
		t.Fatalf("got %v: %v", offsets, err)
	}
	for range 2 { // a retry, and the next
		err := <-errs
		var we *wire.Error
		if !errors.As(err, &we) || we.Code != wire.CodeStorageError || !strings.Contains(err.Error(), `topic "dur" partition 0`) || !strings.Contains(err.Error(), fmt.Sprintf("FETCH at offset %d", pl.bases[1])) {
			t.Fatalf("OnError: %v, want STORAGE_ERROR for the FETCH at %d", err, pl.bases[1])
		}
	}
	if k.Position(0) != pl.bases[1] || len(rec.got) != 0 {
		t.Fatalf("position %d, skipped %v", k.Position(0), rec.got)
	}
}

// TestConsumerFaultyDiskActive: a CRC mismatch in the active segment, below the checkpoint
// and with a valid batch after it, is corruption the broker's recovery refuses to repair: the
// partition serves nothing until repaired, and every request for it is answered
// STORAGE_ERROR naming the partition. The consumer cannot even start (it looks up its start
// offset); a FETCH gets the same answer. That is the expected outcome: there is no batch to
// skip, the partition's files need lqdump and an operator.
func TestConsumerFaultyDiskActive(t *testing.T) {
	t.Parallel()
	var pl poisonLog
	pl.add(poisontest.Batch(1000, "a0", "a1"), false)
	pl.add(poisontest.Batch(2000, "crc0", "crc1"), true)
	pl.add(poisontest.Batch(3000, "b0"), false)
	c := poisonBroker(t, func(dir string) {
		pl.appendTo(t, dir, log.Options{})
		poisontest.Damage(t, dir, pl.bases[1], poisontest.FlipRecordsByte)
	})
	storageError := func(what string, err error) {
		t.Helper()
		var we *wire.Error
		if !errors.As(err, &we) || we.Code != wire.CodeStorageError || !strings.Contains(we.Message, `topic "dur" partition 0`) || !strings.Contains(we.Message, "damaged") {
			t.Fatalf("%s: %v, want STORAGE_ERROR naming the partition", what, err)
		}
	}
	_, err := c.NewConsumer(itCtx(t), client.ConsumerOptions{Topic: "dur"})
	storageError("NewConsumer", err)
	_, err = c.Fetch(itCtx(t), wire.Fetch{Topic: "dur", Offset: 0, MaxBytes: 1 << 20})
	storageError("Fetch", err)
}

// TestConsumerCorruptBatchUnskippable: FETCH answers a real broker does not send (it walks
// its log by the length fields and answers STORAGE_ERROR where one is damaged): a batch whose
// length field runs past the answer, and a corrupt batch whose header ends it before the
// offset asked for. Neither can be skipped: the consumer stops at it even with
// OnCorruptBatch set, without calling it, after delivering what came before, and does not
// fetch again.
func TestConsumerCorruptBatchUnskippable(t *testing.T) {
	good := poisontest.Batch(1000, "g0", "g1", "g2") // offsets 0-2
	withBase := func(b []byte, base int64) []byte {
		b = slices.Clone(b)
		wire.SetBaseOffset(b, base)
		return b
	}
	cut := withBase(poisontest.Batch(2000, "x0", "x1"), 3)
	cut = cut[:len(cut)-5] // its length field says 5 bytes more than the answer holds
	crc := withBase(poisontest.Batch(2000, "y0", "y1"), 0)
	crc[len(crc)-1] ^= 0xff
	for _, tc := range []struct {
		name    string
		start   int64
		answer  []byte
		records int   // delivered before the error
		first   int64 // FirstOffset of the error
	}{
		{"length past the answer", 0, append(withBase(good, 0), cut...), 3, 3},
		{"ends before the offset", 5, crc, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fb := startFake(t)
			fb.AddDurable("dur", func(m *wire.Fetch) []byte {
				resp := wire.FetchResponse{HighWatermark: 10, Batches: tc.answer}
				return resp.AppendTo(nil)
			})
			c := dial(t, fb)
			called := false
			k := ckConsumer(t, c, client.ConsumerOptions{Topic: "dur", Start: client.AtOffset(tc.start),
				OnCorruptBatch: func(*client.CorruptBatchError) error { called = true; return nil }})
			offsets, _, err := eachUntil(t, k, 100)
			var bad *client.CorruptBatchError
			if !errors.As(err, &bad) || bad.Skippable() || bad.LastOffset != -1 || bad.FirstOffset != tc.first || called {
				t.Fatalf("Each: %v (%+v), hook called %v", err, bad, called)
			}
			if len(offsets) != tc.records {
				t.Fatalf("delivered %v", offsets)
			}
			if !strings.Contains(err.Error(), "nor tell where it ends") {
				t.Fatalf("error text %q", err)
			}
			k.Close()
			fb.get(func(fb *fakeBroker) {
				if fb.fetches != 1 {
					t.Errorf("%d FETCHes, want 1", fb.fetches)
				}
			})
		})
	}
}

// TestConsumerTrailingRecordBytes: a batch holding more records than its header counts
// delivers the ones it counts (each has an offset; the extra one has none), and the extra
// bytes are reported to OnError, without stopping the consumer.
func TestConsumerTrailingRecordBytes(t *testing.T) {
	extra := poisontest.ExtraRecord() // offsets 0-1
	good := poisontest.Batch(1000, "g0")
	wire.SetBaseOffset(good, 2)
	fb := startFake(t)
	fb.AddDurable("dur", func(m *wire.Fetch) []byte {
		resp := wire.FetchResponse{HighWatermark: 3}
		switch {
		case m.Offset < 2:
			resp.Batches = append(slices.Clone(extra), good...)
		case m.Offset < 3:
			resp.Batches = good
		default:
			time.Sleep(time.Duration(m.MaxWaitMs) * time.Millisecond) // a long poll
		}
		return resp.AppendTo(nil)
	})
	c := dial(t, fb)
	errs := make(chan error, 16)
	k := ckConsumer(t, c, client.ConsumerOptions{Topic: "dur", MaxWait: 10 * time.Millisecond, OnError: func(err error) { errs <- err }})
	offsets, values, err := eachUntil(t, k, 3)
	if err != nil || !slices.Equal(offsets, []int64{0, 1, 2}) || !slices.Equal(values, []string{"extra-1", "extra-2", "g0"}) {
		t.Fatalf("got %v %q: %v", offsets, values, err)
	}
	if err := <-errs; !strings.Contains(err.Error(), "batch at offset 0: after its 2 records") {
		t.Fatalf("OnError: %v", err)
	}
}

// TestSubscriptionCorruptBatch: DELIVERed batches that do not decode (a transient topic's
// batches are checked as they are consumed, so the records of a batch before its damage are
// delivered). Each returns a *CorruptBatchError naming the offsets and goes on after the
// batch when called again; OnCorruptBatch skips without returning; Messages without it ends
// with Err saying why.
func TestSubscriptionCorruptBatch(t *testing.T) {
	fb := startFake(t)
	fb.AddTopic("tr", 1)
	fb.Store("tr", 0, poisontest.Batch(1000, "a0", "a1"), poisontest.CountMismatch(), // offsets 0-1, 2-4 (4 missing)
		poisontest.Batch(2000, "b0"), poisontest.ZstdGarbage(), poisontest.Batch(3000, "c0")) // 5, 6-7, 8
	c := dial(t, fb)
	all := []string{"a0", "a1", "count-1", "count-2", "b0", "c0"}

	for _, inline := range []bool{false, true} {
		t.Run(fmt.Sprintf("Each/inline=%v", inline), func(t *testing.T) {
			testCorruptEach(t, c, all, client.SubscribeOptions{Topic: "tr", InlineHandler: inline})
		})
	}
	t.Run("OnCorruptBatch", func(t *testing.T) {
		var rec skipRecorder
		s := itSubscribe(t, c, client.SubscribeOptions{Topic: "tr", OnCorruptBatch: rec.skip})
		var values []string
		if err := collectInto(itCtx(t), s, &values, len(all)); err != nil || !slices.Equal(values, all) {
			t.Fatalf("got %q: %v", values, err)
		}
		if len(rec.got) != 2 || !strings.Contains(rec.got[1].Error(), "lightq: topic tr partition 0 offsets 6-7: cannot decode batch: corrupt record batch: zstd") {
			t.Fatalf("skipped %v", rec.got)
		}
	})
	t.Run("Messages", func(t *testing.T) {
		s := itSubscribe(t, c, client.SubscribeOptions{Topic: "tr"})
		var values []string
		for m := range s.Messages() {
			values = append(values, string(m.Value))
		}
		var bad *client.CorruptBatchError
		if !slices.Equal(values, all[:4]) || !errors.As(s.Err(), &bad) || bad.FirstOffset != 4 {
			t.Fatalf("got %q, Err %v", values, s.Err())
		}
	})
}

// testCorruptEach: Each returns each corrupt batch's error and goes on after it.
func testCorruptEach(t *testing.T, c *client.Conn, all []string, opts client.SubscribeOptions) {
	s := itSubscribe(t, c, opts)
	var values []string
	var errs []string
	for len(values) < len(all) {
		err := collectInto(itCtx(t), s, &values, len(all))
		var bad *client.CorruptBatchError
		if errors.As(err, &bad) {
			errs = append(errs, fmt.Sprintf("%d-%d", bad.FirstOffset, bad.LastOffset))
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(values, all) || !slices.Equal(errs, []string{"4-4", "6-7"}) {
		t.Fatalf("got %q, errors %v", values, errs)
	}
}

// collectInto consumes s, appending values, until *values holds n or Each fails.
func collectInto(ctx context.Context, s *client.Subscription, values *[]string, n int) error {
	err := s.Each(ctx, func(m *client.Received) error {
		*values = append(*values, string(m.Value))
		if len(*values) >= n {
			return errItDone
		}
		return nil
	})
	if errors.Is(err, errItDone) {
		err = nil
	}
	return err
}
