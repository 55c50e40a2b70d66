package broker

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lightq/lightq/log/producerstate"
	"github.com/lightq/lightq/wire"
)

func (c *rawClient) initProducer(prevID int64, prevEpoch int16) wire.InitProducerResponse {
	c.t.Helper()
	m := wire.InitProducer{PreviousID: prevID, PreviousEpoch: prevEpoch}
	corr := c.send(wire.OpInitProducer, m.AppendTo(nil))
	var resp wire.InitProducerResponse
	if err := resp.Decode(c.expectResponse(wire.OpInitProducer, corr)); err != nil {
		c.t.Fatal(err)
	}
	return resp
}

// idemBatch is a format-2 batch of values from producer id (epoch) starting at sequence seq.
func idemBatch(t testing.TB, id int64, epoch int16, seq int32, values ...string) []byte {
	var b wire.BatchBuilder
	b.SetMagic(wire.BatchMagic2)
	for _, v := range values {
		b.Append(time.Now().UnixMilli(), nil, []byte(v), nil)
	}
	if id != wire.NoProducer {
		b.SetProducer(id, epoch, seq)
	}
	out, err := b.Finish(wire.CodecNone, nil)
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte(nil), out...)
}

// counter reads one STATS counter of topic.
func (c *rawClient) counter(topic, name string) uint64 {
	c.t.Helper()
	m := wire.TopicName{Name: topic}
	var resp wire.StatsResponse
	if err := resp.Decode(c.expectResponse(wire.OpStats, c.send(wire.OpStats, m.AppendTo(nil)))); err != nil {
		c.t.Fatal(err)
	}
	for _, ct := range resp.Topics[0].Counters {
		if ct.Name == name {
			return ct.Value
		}
	}
	c.t.Fatalf("no counter %q", name)
	return 0
}

func TestInitProducer(t *testing.T) {
	cfg := testConfig(t)
	cfg.producerIDBlock = 3 // every third INIT_PRODUCER reserves a block on the meta pool
	srv := startWith(t, cfg)
	c := login(t, srv.Addr(), testAdminUser, testAdminPass)
	seen := map[int64]bool{}
	var last int64 = -1
	for range 10 {
		r := c.initProducer(wire.NoProducer, wire.NoProducer)
		if seen[r.ProducerID] || r.ProducerID <= last || r.ProducerEpoch != 0 || r.Window != producerstate.Window || r.ExpiryMs != 86400000 {
			t.Fatalf("INIT_PRODUCER gave %+v (last id %d)", r, last)
		}
		seen[r.ProducerID], last = true, r.ProducerID
	}
	// A bump keeps the id and moves the epoch on; past the last epoch, a fresh id.
	if r := c.initProducer(last, 4); r.ProducerID != last || r.ProducerEpoch != 5 {
		t.Fatalf("bump: %+v", r)
	}
	if r := c.initProducer(last, 32767); r.ProducerID <= last || r.ProducerEpoch != 0 {
		t.Fatalf("bump past epoch 32767: %+v", r)
	} else {
		last = r.ProducerID
	}
	m := wire.InitProducer{PreviousID: last + 100, PreviousEpoch: 0}
	if eb := c.expectError(c.send(wire.OpInitProducer, m.AppendTo(nil)), wire.CodeInvalidRequest); !strings.Contains(eb.Message, "never handed out") {
		t.Fatalf("bump of an unknown id: %s", eb.Message)
	}
	bad := append(wire.AppendI64(nil, 5), 0xff, 0xff) // an id with epoch -1
	c.expectError(c.send(wire.OpInitProducer, bad), wire.CodeInvalidRequest)
	// Authentication is enough: a topic user that owns no topic here may ask too.
	admin := c
	admin.createTopic("owned", 1, "someone", "someone-pw")
	u := login(t, srv.Addr(), "someone", "someone-pw")
	if r := u.initProducer(wire.NoProducer, wire.NoProducer); r.ProducerID <= last {
		t.Fatalf("topic user got %+v", r)
	}
	pre := dialRaw(t, srv.Addr())
	pre.hello()
	pre.expectError(pre.send(wire.OpInitProducer, (&wire.InitProducer{PreviousID: -1, PreviousEpoch: -1}).AppendTo(nil)), wire.CodeNotAuthenticated)

	// After a restart, ids go on after every id handed out before.
	if err := srv.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	srv2 := startWith(t, cfg)
	c2 := login(t, srv2.Addr(), testAdminUser, testAdminPass)
	if r := c2.initProducer(wire.NoProducer, wire.NoProducer); r.ProducerID <= last+1 {
		t.Fatalf("after a restart: id %d, ids up to %d were handed out", r.ProducerID, last+1)
	}
}

// A damaged producer-ids file stops the broker from starting: ids could repeat otherwise.
func TestProducerIDsFileDamaged(t *testing.T) {
	cfg := testConfig(t)
	srv := startWith(t, cfg)
	if err := srv.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(cfg.DataDir, producerIDsFile)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[12] ^= 1
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("New with a damaged producer-ids file: %v", err)
	}
}

// idemTopic is a topic of either kind for the idempotence tests.
type idemTopic struct {
	name    string
	durable bool
	fsync   string
}

func (tt idemTopic) create(admin *rawClient) {
	if tt.durable {
		admin.createDurable(tt.name, 2, wire.Option{Key: "fsync", Value: tt.fsync})
	} else {
		m := wire.CreateTopic{Name: tt.name, Kind: wire.KindTransient, Partitions: 2, User: "d-user", Password: "d-pw"}
		admin.expectResponse(wire.OpCreateTopic, admin.send(wire.OpCreateTopic, m.AppendTo(nil)))
	}
}

var idemTopics = []idemTopic{
	{name: "transient"},
	{name: "always", durable: true, fsync: "always"},
	{name: "never", durable: true, fsync: "never"},
}

// TestIdempotentProduce: a re-sent batch gets its original offsets and is stored once; gaps,
// old epochs, unknown producers and idempotent batches with acks 0 or partition -1 are
// refused, and nothing refused is stored.
func TestIdempotentProduce(t *testing.T) {
	for _, tt := range idemTopics {
		t.Run(tt.name, func(t *testing.T) {
			srv := startBroker(t, nil)
			admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
			tt.create(admin)
			c := login(t, srv.Addr(), "d-user", "d-pw")
			var sub *rawClient
			var subID uint32
			if !tt.durable {
				sub = login(t, srv.Addr(), "d-user", "d-pw")
				subID = sub.subscribe(tt.name, 1, "", 1<<20)
			}
			p := c.initProducer(wire.NoProducer, wire.NoProducer)
			seq := int32(0)
			var batches [][]byte
			var bases []int64
			for i := range 4 {
				b := idemBatch(t, p.ProducerID, p.ProducerEpoch, seq, fmt.Sprint(i), fmt.Sprint(i)+"b")
				seq += 2
				acks := []wire.Acks{wire.AcksWritten, wire.AcksDurable}[i%2]
				r := c.produceAcks(tt.name, 1, acks, b)
				batches, bases = append(batches, b), append(bases, r.BaseOffset)
			}
			// Every batch sent again, in order, as after a reconnect: the original offsets.
			for i, b := range batches {
				if r := c.produceAcks(tt.name, 1, wire.AcksWritten, b); r.BaseOffset != bases[i] || r.Partition != 1 {
					t.Fatalf("re-sent batch %d: %+v, want base %d", i, r, bases[i])
				}
			}
			if n := c.counter(tt.name, "duplicate_batches"); n != 4 {
				t.Fatalf("duplicate_batches %d, want 4", n)
			}
			// Refusals.
			refuse := func(b []byte, partition int32, acks wire.Acks, code wire.Code, want string) {
				t.Helper()
				eb := c.expectError(c.send(wire.OpProduce, produceBody(tt.name, partition, acks, b)), code)
				if !strings.Contains(eb.Message, want) {
					t.Fatalf("%s: %q does not say %q", code, eb.Message, want)
				}
			}
			refuse(idemBatch(t, p.ProducerID, 0, seq+1, "gap"), 1, wire.AcksWritten, wire.CodeOutOfOrderSequence, "(a gap)")
			refuse(idemBatch(t, p.ProducerID, 0, 2, "x"), 1, wire.AcksWritten, wire.CodeOutOfOrderSequence, "already stored")
			refuse(idemBatch(t, p.ProducerID+1000, 0, 0, "x"), 1, wire.AcksWritten, wire.CodeUnknownProducer, "never handed out")
			q := c.initProducer(wire.NoProducer, wire.NoProducer)
			refuse(idemBatch(t, q.ProducerID, 0, 5, "x"), 1, wire.AcksWritten, wire.CodeUnknownProducer, "holds no state")
			refuse(idemBatch(t, p.ProducerID, 0, seq, "x"), 1, wire.AcksNone, wire.CodeInvalidRequest, "acks 0")
			refuse(idemBatch(t, p.ProducerID, 0, seq, "x"), wire.PartitionAny, wire.AcksWritten, wire.CodeInvalidRequest, "partition -1")
			// The next epoch fences the old one.
			bumped := c.initProducer(p.ProducerID, p.ProducerEpoch)
			refuse(idemBatch(t, p.ProducerID, bumped.ProducerEpoch, 3, "x"), 1, wire.AcksWritten, wire.CodeOutOfOrderSequence, "new epoch starts at sequence 0")
			nb := idemBatch(t, p.ProducerID, bumped.ProducerEpoch, 0, "new epoch")
			newBase := c.produceAcks(tt.name, 1, wire.AcksWritten, nb).BaseOffset
			if newBase != bases[3]+2 {
				t.Fatalf("new epoch's batch at %d, want %d", newBase, bases[3]+2)
			}
			refuse(idemBatch(t, p.ProducerID, 0, seq, "old"), 1, wire.AcksWritten, wire.CodeProducerFenced, "epoch 1 has written here")
			// Format-1 and producer-less batches are stored as ever.
			plain := c.produceAcks(tt.name, 1, wire.AcksWritten, testBatch(t, "plain")).BaseOffset
			c.produceAcks(tt.name, 1, wire.AcksWritten, idemBatch(t, wire.NoProducer, 0, 0, "no producer"))
			if n := c.counter(tt.name, "producer_states"); n != 1 {
				t.Fatalf("producer_states %d, want 1", n)
			}

			want := []string{"0", "0b", "1", "1b", "2", "2b", "3", "3b", "new epoch", "plain", "no producer"}
			var got []string
			if tt.durable {
				for off := int64(0); len(got) < len(want); {
					_, values := c.fetchValues(tt.name, 1, off, 1000)
					if len(values) == 0 {
						t.Fatalf("nothing at %d; got %q", off, got)
					}
					got = append(got, values...)
					off += int64(len(values))
				}
			} else {
				for len(got) < len(want) {
					d := sub.readDeliver()
					if d.sub != subID || d.dropped != 0 {
						t.Fatalf("deliver %+v", d)
					}
					got = append(got, d.values...)
				}
			}
			if strings.Join(got, ",") != strings.Join(want, ",") {
				t.Fatalf("stored %q, want %q", got, want)
			}
			if plain != newBase+1 {
				t.Fatalf("plain batch at %d, want %d", plain, newBase+1)
			}
		})
	}
}

// TestIdempotentAcrossRestart: a durable partition's producer state survives a clean
// restart and a kill -9 (a copy of the data directory taken while the broker runs holds
// what kill -9 leaves: everything written, in the page cache), including segments rolled
// (snapshots) and deleted by retention.
func TestIdempotentAcrossRestart(t *testing.T) {
	for _, kill := range []bool{false, true} {
		t.Run(fmt.Sprintf("kill=%v", kill), func(t *testing.T) {
			cfg := testConfig(t)
			srv := startWith(t, cfg)
			admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
			admin.createDurable("events", 1, wire.Option{Key: "segment.bytes", Value: "2097152"}, wire.Option{Key: "retention.bytes", Value: "4194304"})
			c := login(t, srv.Addr(), "d-user", "d-pw")
			quiet := c.initProducer(wire.NoProducer, wire.NoProducer) // its batches end up deleted by retention
			busy := c.initProducer(wire.NoProducer, wire.NoProducer)
			big := strings.Repeat("v", 200<<10)
			quietBatch := idemBatch(t, quiet.ProducerID, 0, 0, "quiet")
			quietBase := c.produceAcks("events", 0, wire.AcksWritten, quietBatch).BaseOffset
			var last [][]byte
			var lastBases []int64
			seq := int32(0)
			for i := range 60 { // 12 MiB: six segments, four deleted by retention
				b := idemBatch(t, busy.ProducerID, 0, seq, big, fmt.Sprint(i))
				seq += 2
				r := c.produceAcks("events", 0, wire.AcksWritten, b)
				last, lastBases = append(last, b), append(lastBases, r.BaseOffset)
			}
			last, lastBases = last[len(last)-producerstate.Window:], lastBases[len(lastBases)-producerstate.Window:]
			dir := partitionDir(cfg.DataDir, "events", 0)
			waitUntil(t, "retention deleted the first segments", func() bool {
				segs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
				_, err := os.Stat(filepath.Join(dir, "00000000000000000000.log"))
				return os.IsNotExist(err) && len(segs) <= 3
			})
			cfg2 := cfg
			if kill {
				cfg2.DataDir = t.TempDir()
				copyDir(t, cfg.DataDir, cfg2.DataDir)
			} else if err := srv.Shutdown(t.Context()); err != nil {
				t.Fatal(err)
			}
			srv2 := startWith(t, cfg2)
			c2 := login(t, srv2.Addr(), "d-user", "d-pw")
			for i, b := range last {
				if r := c2.produceAcks("events", 0, wire.AcksWritten, b); r.BaseOffset != lastBases[i] {
					t.Fatalf("re-sent batch %d after the restart at %d, want %d", i, r.BaseOffset, lastBases[i])
				}
			}
			if r := c2.produceAcks("events", 0, wire.AcksWritten, quietBatch); r.BaseOffset != quietBase {
				t.Fatalf("the quiet producer's batch, whose segment retention deleted, at %d, want %d", r.BaseOffset, quietBase)
			}
			next := lastBases[len(lastBases)-1] + 2
			if r := c2.produceAcks("events", 0, wire.AcksWritten, idemBatch(t, busy.ProducerID, 0, seq, "next")); r.BaseOffset != next {
				t.Fatalf("next batch at %d, want %d", r.BaseOffset, next)
			}
			if n := c2.counter("events", "duplicate_batches"); n != uint64(len(last))+1 {
				t.Fatalf("duplicate_batches %d", n)
			}
			// Ids go on after the ones handed out before the restart.
			if r := c2.initProducer(wire.NoProducer, wire.NoProducer); r.ProducerID <= busy.ProducerID {
				t.Fatalf("id %d after the restart, %d handed out before", r.ProducerID, busy.ProducerID)
			}
		})
	}
}

// copyDir copies a directory tree (a running broker's data directory: files are copied as
// they are at that moment).
func copyDir(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := os.ReadFile(path)
		if os.IsNotExist(err) {
			return nil // deleted meanwhile (retention), as it could be at a kill
		}
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestMixedMagicFetch: one durable partition holding format-1 batches, format-2 batches
// without a producer and idempotent ones serves each as it was produced, with the leader
// epoch the broker wrote; so does a transient one to its subscribers.
func TestMixedMagicFetch(t *testing.T) {
	for _, durable := range []bool{true, false} {
		t.Run(fmt.Sprintf("durable=%v", durable), func(t *testing.T) {
			srv := startBroker(t, nil)
			admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
			idemTopic{name: "mixed", durable: durable, fsync: "always"}.create(admin)
			c := login(t, srv.Addr(), "d-user", "d-pw")
			var sub *rawClient
			if !durable {
				sub = login(t, srv.Addr(), "d-user", "d-pw")
				sub.subscribe("mixed", 0, "", 1<<20)
			}
			p := c.initProducer(wire.NoProducer, wire.NoProducer)
			sentBatches := [][]byte{
				testBatch(t, "m1-a", "m1-b"),
				func() []byte {
					b := idemBatch(t, wire.NoProducer, 0, 0, "m2-none")
					wire.SetBatchLeaderEpoch(b, 99)
					return b
				}(),
				idemBatch(t, p.ProducerID, p.ProducerEpoch, 0, "m2-p0", "m2-p1"),
				testBatch(t, "m1-c"),
				idemBatch(t, p.ProducerID, p.ProducerEpoch, 2, "m2-p2"),
			}
			for _, b := range sentBatches {
				c.produceAcks("mixed", 0, wire.AcksWritten, bytes.Clone(b))
			}
			var got []wire.Batch
			if durable {
				resp, _ := c.fetchValues("mixed", 0, 0, 1000)
				for rest := resp.Batches; len(rest) > 0; {
					n := wire.BatchSize(rest)
					bt, err := wire.ParseBatch(rest[:n], 1<<20)
					if err != nil {
						t.Fatal(err)
					}
					got = append(got, bt)
					rest = rest[n:]
				}
			} else {
				for len(got) < len(sentBatches) {
					got = append(got, sub.readDeliver().batch)
				}
			}
			if len(got) != len(sentBatches) {
				t.Fatalf("%d batches served, want %d", len(got), len(sentBatches))
			}
			for i, bt := range got {
				want, _ := wire.ParseBatch(sentBatches[i], 1<<20)
				if bt.Magic != want.Magic || bt.ProducerID != want.ProducerID || bt.BaseSequence != want.BaseSequence || bt.CRC != want.CRC ||
					!bytes.Equal(bt.Records, want.Records) {
					t.Fatalf("batch %d served as %+v, produced as %+v", i, bt.BatchHeader, want.BatchHeader)
				}
				if bt.Magic == wire.BatchMagic2 && bt.LeaderEpoch != leaderEpoch {
					t.Fatalf("batch %d: leader epoch %d, the broker writes %d", i, bt.LeaderEpoch, leaderEpoch)
				}
			}
		})
	}
}

// TestIdempotentProduceExamples: the INIT_PRODUCER and OUT_OF_ORDER_SEQUENCE examples of
// PROTOCOL.md section 15 are what this broker answers (the default window and expiry, and
// the text of a gap).
func TestIdempotentProduceExamples(t *testing.T) {
	cfg := testConfig(t)
	// A data directory whose ids went up to 4097, like the example's.
	b := make([]byte, 16)
	copy(b, producerIDsMagic)
	binary.BigEndian.PutUint64(b[8:], 4097)
	binary.BigEndian.PutUint32(b[4:], wire.Checksum(b[8:]))
	if err := os.WriteFile(filepath.Join(cfg.DataDir, producerIDsFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startWith(t, cfg)
	admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
	admin.createTopic("orders", 2, "orders-app", "pa55word")
	c := login(t, srv.Addr(), "orders-app", "pa55word")
	golden := func(name string) []byte {
		b, err := os.ReadFile("../testdata/frames/" + name + ".bin")
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	answer := func(request string) []byte {
		c.write(golden(request))
		f := c.mustRead()
		return wire.AppendFrame(nil, f.h.Op, f.h.Flags, f.h.Corr, f.body)
	}
	if got, want := answer("init-producer-request"), golden("init-producer-response"); !bytes.Equal(got, want) {
		t.Fatalf("INIT_PRODUCER answer\n% x\nthe example\n% x", got, want)
	}
	// Sequences 0-37 stored: the example's batch (base sequence 40) leaves a gap.
	c.produceAcks("orders", 1, wire.AcksWritten, idemBatch(t, 4097, 0, 0, make([]string, 38)...))
	if got, want := answer("produce-request-idempotent"), golden("error-out-of-order-sequence"); !bytes.Equal(got, want) {
		t.Fatalf("answer to the gap\n%q\nthe example\n%q", got, want)
	}
}

// TestIdempotentRace: two connections (on two event loops) send the same producer's batches
// at the same time, as an old connection still delivering its batches does while the
// producer re-sends them on a new one: each round, both send the same window of batches,
// pipelined. Each batch is stored exactly once, and both answers name the same offsets.
func TestIdempotentRace(t *testing.T) {
	for _, tt := range idemTopics[:2] {
		t.Run(tt.name, func(t *testing.T) {
			srv := startBroker(t, func(c *Config) { c.EventLoops = 2 })
			admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
			tt.create(admin)
			a, b := login(t, srv.Addr(), "d-user", "d-pw"), login(t, srv.Addr(), "d-user", "d-pw")
			p := a.initProducer(wire.NoProducer, wire.NoProducer)
			const rounds, w = 30, producerstate.Window
			for r := range rounds {
				var frames []byte
				for i := r * w; i < (r+1)*w; i++ {
					batch := idemBatch(t, p.ProducerID, 0, int32(3*i), strings.Repeat("x", 100*(i%7)), fmt.Sprint(i), "z")
					frames = wire.AppendFrame(frames, wire.OpProduce, 0, uint32(1000+i), produceBody(tt.name, 0, wire.AcksWritten, batch))
				}
				results := [][]int64{make([]int64, w), make([]int64, w)}
				got := make([]int, 2)
				failures := make([]string, 2)
				done := make(chan struct{}, 2)
				for k, c := range []*rawClient{a, b} {
					go func() {
						defer func() { done <- struct{}{} }()
						if _, err := c.conn.Write(frames); err != nil {
							failures[k] = err.Error()
							return
						}
						for range w {
							f, err := c.readFrame(20 * time.Second)
							if err != nil || f.h.Op != wire.OpProduce {
								var eb wire.ErrorBody
								_ = eb.Decode(f.body)
								failures[k] = fmt.Sprintf("%v %s %s: %s", err, f.h.Op, eb.Code, eb.Message)
								return
							}
							var resp wire.ProduceResponse
							if err := resp.Decode(f.body); err != nil {
								failures[k] = err.Error()
								return
							}
							results[k][f.h.Corr-1000-uint32(r*w)] = resp.BaseOffset // answers that wait for an fsync may come later
							got[k]++
						}
					}()
				}
				<-done
				<-done
				for k := range results {
					if got[k] != w {
						t.Fatalf("round %d: connection %d got %d answers, want %d: %s", r, k, got[k], w, failures[k])
					}
					for i, base := range results[k] {
						if want := int64(3 * (r*w + i)); base != want {
							t.Fatalf("round %d: connection %d, batch %d: base %d, want %d", r, k, r*w+i, base, want)
						}
					}
				}
			}
			if d := admin.counter(tt.name, "duplicate_batches"); d != rounds*w {
				t.Fatalf("duplicate_batches %d, want %d", d, rounds*w)
			}
			if in := admin.counter(tt.name, "batches_in"); in != rounds*w {
				t.Fatalf("batches_in %d, want %d", in, rounds*w)
			}
		})
	}
}
