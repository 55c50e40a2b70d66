package crash

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/maphash"
	"sync"

	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
)

// The verifier: a Jepsen-style history of every produced message, checked against a full
// read of the topic after each restart.
//
// Payload layout (64 B to 4 KiB):
//
//	0       4               12      16
//	+-------+---------------+-------+--------------------
//	| pid   | seq u64       | crc32 | random bytes ...
//	+-------+---------------+-------+--------------------
//
// crc32 (IEEE) covers bytes 0-12 and 16 to the end, so a damaged id is caught too. pid is
// unique per producer over the whole test (first cycle of its data directory * producers + i),
// seq counts from 0 over all the cycles the producer lives through.

const payloadHeader = 16

// requireNoDuplicates makes every message stored twice a violation: the client's producer is
// idempotent (PROTOCOL.md section 15), so a batch re-sent after a kill -9 lost its
// acknowledgement is answered with its original offsets, not stored again.
const requireNoDuplicates = true

// status is what the client learned about one message.
type status uint8

const (
	stAttempted     status = iota // handed to Send; no outcome (yet)
	stAcked                       // acknowledged with (partition, offset)
	stFailed                      // failed, the client says not stored (client.ErrNotStored)
	stUnsent                      // Send returned an error: never taken, definitely not stored
	stIndeterminate               // failed, the client says it may be stored (client.ErrMaybeStored): "unknown"
)

func (s status) String() string {
	return [...]string{"attempted", "acked", "failed", "unsent", "indeterminate"}[s]
}

// msgRec is one produced message in the history.
type msgRec struct {
	hash    uint64 // maphash of the whole payload
	off     int64  // acked offset
	size    int32
	cycle   int32 // the cycle it was sent in
	part    int8  // partition the message was sent to
	ackPart int8  // partition of the ack
	status  status

	// Verification bookkeeping (test goroutine only).
	seenPass     uint32 // last verification pass that read it
	seenCount    uint16 // reads in seenPass
	ackFoundPass uint32 // last pass that read it at its acked (partition, offset)
	lostReported bool
}

// prodHist is one producer's messages, indexed by seq, over the cycles it lives through.
type prodHist struct {
	id    uint32
	mu    sync.Mutex // guards msgs and cycle while the producer and its callbacks run
	cycle int        // the cycle now running: the next messages are sent in it
	msgs  []msgRec
}

func (h *prodHist) add(r msgRec) {
	h.mu.Lock()
	r.cycle = int32(h.cycle)
	h.msgs = append(h.msgs, r)
	h.mu.Unlock()
}

// setCycle starts a new cycle for the producer.
func (h *prodHist) setCycle(cycle int) {
	h.mu.Lock()
	h.cycle = cycle
	h.mu.Unlock()
}

// resolve records the callback outcome of message seq.
func (h *prodHist) resolve(seq uint64, a client.Ack, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := &h.msgs[seq]
	if m.status != stAttempted {
		m.status = stIndeterminate // two outcomes for one message: distrust both
		return
	}
	switch {
	case err == nil:
		m.status, m.ackPart, m.off = stAcked, int8(a.Partition), a.Offset
	case errors.Is(err, client.ErrNotStored) && !errors.Is(err, client.ErrMaybeStored):
		m.status = stFailed // the verifier holds the client to it: failed-but-present
	default:
		m.status = stIndeterminate // maybe stored, or an error that does not say
	}
}

func (h *prodHist) unsent(seq uint64) {
	h.mu.Lock()
	h.msgs[seq].status = stUnsent
	h.mu.Unlock()
}

// offEntry is what was read at one (partition, offset), ever.
type offEntry struct {
	hash uint64
	set  bool
	live bool // first read by the live consumer (not yet by a verification pass)
}

// liveRead is a record the live consumer read during a cycle.
type liveRead struct {
	part int
	off  int64
	hash uint64
}

// history is the state of one data directory's topic over its cycles.
type history struct {
	noDuplicates bool // a message stored twice is a violation (requireNoDuplicates)
	commits      *commitHist
	seed         maphash.Seed
	prods        map[uint32]*prodHist
	offsets      [partitions][]offEntry
	hw           [partitions]int64 // high watermarks of the last verification
	pass         uint32
}

func newHistory(seed maphash.Seed) *history {
	return &history{seed: seed, prods: map[uint32]*prodHist{}, commits: newCommitHist(), noDuplicates: requireNoDuplicates}
}

func (st *history) newProducer(id uint32, cycle int) *prodHist {
	h := &prodHist{id: id, cycle: cycle}
	st.prods[id] = h
	return h
}

// fillPayload writes a payload of len(buf) bytes for (pid, seq) using rnd for the body.
func fillPayload(buf []byte, pid uint32, seq uint64, rnd func() uint64) {
	binary.BigEndian.PutUint32(buf[0:], pid)
	binary.BigEndian.PutUint64(buf[4:], seq)
	body := buf[payloadHeader:]
	for i := 0; i < len(body); i += 8 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], rnd())
		copy(body[i:], w[:])
	}
	binary.BigEndian.PutUint32(buf[12:], payloadCRC(buf))
}

func payloadCRC(v []byte) uint32 {
	return crc32.Update(crc32.ChecksumIEEE(v[:12]), crc32.IEEETable, v[payloadHeader:])
}

// payloadOK checks a payload's own CRC and returns its id.
func payloadOK(v []byte) (pid uint32, seq uint64, ok bool) {
	if len(v) < payloadHeader {
		return 0, 0, false
	}
	pid, seq = binary.BigEndian.Uint32(v), binary.BigEndian.Uint64(v[4:])
	return pid, seq, binary.BigEndian.Uint32(v[12:]) == payloadCRC(v)
}

// counts are the verifier's figures. The violation counters are summed over verification
// passes (a message lost in cycle 1 is counted once per later pass, except lostAcked, which
// counts each message once).
type counts struct {
	attempted, acked, failed, unsent, indeterminate, indetPresent int
	noCallback, ackMismatch                                       int

	lostAcked, misplaced, corrupt, phantom, failedPresent int
	inconsistent, vanished, order, duplicates, illegalDup int

	liveRead, liveCorrupt int
	recordsRead           int64

	// Committed offsets (commits_test.go).
	commitsSent, commitsAcked, commitsFailed, commitsIndeterminate int
	commitLost, commitPhantom                                      int
}

func (c *counts) add(o counts) {
	c.attempted += o.attempted
	c.acked += o.acked
	c.failed += o.failed
	c.unsent += o.unsent
	c.indeterminate += o.indeterminate
	c.indetPresent += o.indetPresent
	c.noCallback += o.noCallback
	c.ackMismatch += o.ackMismatch
	c.lostAcked += o.lostAcked
	c.misplaced += o.misplaced
	c.corrupt += o.corrupt
	c.phantom += o.phantom
	c.failedPresent += o.failedPresent
	c.inconsistent += o.inconsistent
	c.vanished += o.vanished
	c.order += o.order
	c.duplicates += o.duplicates
	c.illegalDup += o.illegalDup
	c.liveRead += o.liveRead
	c.liveCorrupt += o.liveCorrupt
	c.recordsRead += o.recordsRead
	c.commitsSent += o.commitsSent
	c.commitsAcked += o.commitsAcked
	c.commitsFailed += o.commitsFailed
	c.commitsIndeterminate += o.commitsIndeterminate
	c.commitLost += o.commitLost
	c.commitPhantom += o.commitPhantom
}

// violations is the sum of everything that must be 0.
func (c *counts) violations() int {
	return c.lostAcked + c.misplaced + c.corrupt + c.phantom + c.failedPresent + c.inconsistent +
		c.vanished + c.order + c.illegalDup + c.noCallback + c.ackMismatch + c.liveCorrupt +
		c.commitLost + c.commitPhantom
}

// report collects problem descriptions, keeping the first few of each kind.
type report struct {
	counts
	problems []string
	perKind  map[string]int
}

func (r *report) problem(kind, format string, args ...any) {
	if r.perKind == nil {
		r.perKind = map[string]int{}
	}
	r.perKind[kind]++
	if r.perKind[kind] <= 5 {
		r.problems = append(r.problems, kind+": "+fmt.Sprintf(format, args...))
	}
}

// settleCycle closes the books of the messages sent in a finished cycle: outcome counts, and
// messages whose callback never ran (a client bug) become indeterminate.
func (st *history) settleCycle(cycle int, r *report) {
	for _, h := range st.prods {
		h.mu.Lock()
		for i := range h.msgs {
			m := &h.msgs[i]
			if int(m.cycle) != cycle {
				continue
			}
			r.attempted++
			switch m.status {
			case stAttempted:
				r.noCallback++
				r.problem("no-callback", "producer %d seq %d: Send took it but its callback never ran", h.id, i)
				m.status = stIndeterminate
				r.indeterminate++
			case stAcked:
				r.acked++
				if m.ackPart != m.part || m.off < 0 {
					r.ackMismatch++
					r.problem("ack-mismatch", "producer %d seq %d sent to partition %d, acked as partition %d offset %d", h.id, i, m.part, m.ackPart, m.off)
				}
			case stFailed:
				r.failed++
			case stUnsent:
				r.unsent++
			case stIndeterminate:
				r.indeterminate++
			}
		}
		h.mu.Unlock()
	}
}

// mergeLive records what the live consumer read, checking it against earlier reads.
func (st *history) mergeLive(reads []liveRead, r *report) {
	for _, lr := range reads {
		e := st.entry(lr.part, lr.off)
		if e.set && e.hash != lr.hash {
			r.inconsistent++
			r.problem("inconsistent-offset", "partition %d offset %d: the live consumer read other content than was read there before", lr.part, lr.off)
			continue
		}
		if !e.set {
			*e = offEntry{hash: lr.hash, set: true, live: true}
		}
	}
}

func (st *history) entry(part int, off int64) *offEntry {
	s := st.offsets[part]
	if int64(len(s)) <= off {
		n := max(int64(len(s))*2, off+1, 1024)
		ns := make([]offEntry, n)
		copy(ns, s)
		st.offsets[part] = ns
		s = ns
	}
	return &s[off]
}

// fetchFunc reads batches of one partition from off: the high watermark and log start offset
// of the answer, and the batches as they came (whole, back to back).
type fetchFunc func(ctx context.Context, part int, off int64) (hw, logStart int64, batches []byte, err error)

// connFetcher reads with FETCH, isolation written, up to 1 MiB at a time.
func connFetcher(c *client.Conn) fetchFunc {
	return func(ctx context.Context, part int, off int64) (int64, int64, []byte, error) {
		res, err := c.Fetch(ctx, wire.Fetch{Topic: topicName, Partition: uint32(part), Offset: off,
			MaxBytes: 1 << 20, Isolation: wire.IsolationWritten})
		if err != nil {
			return 0, 0, nil, err
		}
		return res.HighWatermark, res.LogStartOffset, res.FetchResponse.Batches, nil
	}
}

// maxBatchParse bounds a batch the verifier parses (the broker's MaxBatch is 1 MiB).
const maxBatchParse = 16 << 20

// verify reads every partition from offset 0 to its high watermark and checks the history.
// It parses the batches itself rather than through the client, so that a client bug cannot
// hide a broker one.
func (st *history) verify(ctx context.Context, fetch fetchFunc, r *report) error {
	st.pass++
	pass := st.pass
	lastSeq := map[orderKey]uint64{}
	var comp wire.Compressor
	defer comp.Close()
	var dbuf []byte
	for part := 0; part < partitions; part++ {
		off, hw := int64(0), int64(-1)
		for iter := 0; ; iter++ {
			if iter > 1<<20 {
				return fmt.Errorf("partition %d: no end after %d fetches", part, iter)
			}
			rhw, logStart, batches, err := fetch(ctx, part, off)
			if err != nil {
				return fmt.Errorf("partition %d: fetch at %d: %w", part, off, err)
			}
			if hw < 0 {
				hw = rhw
				if logStart != 0 {
					r.problem("log-start", "partition %d: log start offset %d, want 0 (no retention configured)", part, logStart)
					r.corrupt++
				}
			}
			if off >= hw {
				break
			}
			progress := false
			for len(batches) > 0 {
				n := wire.BatchSize(batches)
				if n < wire.BatchHeaderSize || n > len(batches) {
					r.corrupt++
					r.problem("corrupt-batch", "partition %d at offset %d: batch of %d bytes, %d left in the answer", part, off, n, len(batches))
					return fmt.Errorf("partition %d: unframed batch at %d", part, off)
				}
				bt, err := wire.ParseBatch(batches[:n], maxBatchParse)
				batches = batches[n:]
				if err != nil {
					r.corrupt++
					r.problem("corrupt-batch", "partition %d at offset %d: %v", part, off, err)
					return fmt.Errorf("partition %d: corrupt batch at %d: %w", part, off, err)
				}
				if bt.BaseOffset > off {
					r.corrupt++
					r.problem("offset-gap", "partition %d: batch at base %d, expected offset %d next", part, bt.BaseOffset, off)
					return fmt.Errorf("partition %d: offset gap at %d", part, off)
				}
				recs := bt.Records
				if bt.Codec() != wire.CodecNone {
					if dbuf, err = comp.Decompress(dbuf[:0], &bt); err != nil {
						r.corrupt++
						r.problem("corrupt-batch", "partition %d batch %d: %v", part, bt.BaseOffset, err)
						return fmt.Errorf("partition %d: undecodable batch at %d", part, bt.BaseOffset)
					}
					recs = dbuf
				}
				ri := wire.NewRecordIter(recs, bt.RecordCount, bt.BaseOffset, bt.FirstTimestamp)
				var rec wire.Record
				for ri.Next(&rec) {
					if rec.Offset < off {
						continue
					}
					if rec.Offset >= hw {
						break
					}
					st.check(part, rec.Offset, rec.Value, pass, lastSeq, r)
					off = rec.Offset + 1
					progress = true
				}
				if err := ri.Err(); err != nil {
					r.corrupt++
					r.problem("corrupt-batch", "partition %d batch %d: records: %v", part, bt.BaseOffset, err)
					return fmt.Errorf("partition %d: undecodable records at %d", part, bt.BaseOffset)
				}
			}
			if !progress {
				return fmt.Errorf("partition %d: a fetch at %d (high watermark %d) returned nothing new", part, off, hw)
			}
		}
		st.hw[part] = hw
		// Everything ever read at or past the high watermark vanished.
		for o := hw; o < int64(len(st.offsets[part])); o++ {
			if e := st.offsets[part][o]; e.set {
				r.vanished++
				src := "a verification pass"
				if e.live {
					src = "the live consumer"
				}
				r.problem("read-then-vanished", "partition %d offset %d was read by %s, the high watermark is now %d", part, o, src, hw)
			}
		}
	}
	// Every acked message must have been read at its acked place.
	for _, h := range st.prods {
		for seq := range h.msgs {
			m := &h.msgs[seq]
			if m.status != stAcked || m.ackFoundPass == pass || m.lostReported {
				continue
			}
			m.lostReported = true
			if m.seenPass == pass {
				r.misplaced++
				r.problem("misplaced", "producer %d seq %d acked at partition %d offset %d but read elsewhere", h.id, seq, m.ackPart, m.off)
			} else {
				r.lostAcked++
				r.problem("lost-acked", "producer %d (cycle %d) seq %d acked at partition %d offset %d, not found (high watermark %d)", h.id, m.cycle, seq, m.ackPart, m.off, st.hw[m.ackPart])
			}
		}
	}
	return nil
}

// orderKey is one producer's messages within one partition.
type orderKey struct {
	part int
	pid  uint32
}

// check verifies one record read at (part, off).
func (st *history) check(part int, off int64, v []byte, pass uint32, lastSeq map[orderKey]uint64, r *report) {
	r.recordsRead++
	h := maphash.Bytes(st.seed, v)
	e := st.entry(part, off)
	if e.set && e.hash != h {
		r.inconsistent++
		r.problem("inconsistent-offset", "partition %d offset %d: content differs from an earlier read", part, off)
	}
	*e = offEntry{hash: h, set: true}
	pid, seq, ok := payloadOK(v)
	if !ok {
		r.corrupt++
		r.problem("corrupt-payload", "partition %d offset %d: payload of %d bytes fails its CRC", part, off, len(v))
		return
	}
	ph := st.prods[pid]
	if ph == nil || seq >= uint64(len(ph.msgs)) {
		r.phantom++
		r.problem("phantom", "partition %d offset %d: producer %d seq %d was never attempted", part, off, pid, seq)
		return
	}
	m := &ph.msgs[seq]
	if m.hash != h || int(m.size) != len(v) {
		r.corrupt++
		r.problem("corrupt-payload", "partition %d offset %d: producer %d seq %d has other bytes than were sent", part, off, pid, seq)
		return
	}
	if int(m.part) != part {
		r.misplaced++
		r.problem("misplaced", "partition %d offset %d: producer %d seq %d was sent to partition %d", part, off, pid, seq, m.part)
	}
	dup := m.seenPass == pass
	if dup {
		m.seenCount++
		r.duplicates++
		if st.noDuplicates {
			r.illegalDup++
			r.problem("duplicate", "producer %d seq %d (%v) read %d times, again at partition %d offset %d", pid, seq, m.status, m.seenCount, part, off)
		}
	} else {
		m.seenPass, m.seenCount = pass, 1
	}
	switch m.status {
	case stFailed, stUnsent:
		r.failedPresent++
		r.problem("failed-but-present", "producer %d seq %d (%v) is at partition %d offset %d", pid, seq, m.status, part, off)
	case stAcked:
		if int(m.ackPart) == part && m.off == off {
			m.ackFoundPass = pass
		}
	}
	// Per-producer order within a partition. One connection's batches to a partition are
	// appended in the order sent, and after a reconnect the client re-sends the unanswered
	// ones in that order before anything newer, so the first copies of a producer's records
	// are in seq order, acked or not. A duplicate (reported above) is not checked again.
	k := orderKey{part, pid}
	if dup {
		return
	}
	if last, ok := lastSeq[k]; ok && seq <= last {
		r.order++
		r.problem("order", "partition %d: producer %d seq %d (%v) at offset %d after its seq %d", part, pid, seq, m.status, off, last)
	}
	lastSeq[k] = seq
}

// indeterminatePresent counts the indeterminate messages sent in cycle that the last
// verification pass read.
func (st *history) indeterminatePresent(cycle int) int {
	n := 0
	for _, h := range st.prods {
		for i := range h.msgs {
			m := &h.msgs[i]
			if int(m.cycle) == cycle && m.status == stIndeterminate && m.seenPass == st.pass {
				n++
			}
		}
	}
	return n
}

// duplicatedMessages counts the messages the last verification pass read more than once.
func (st *history) duplicatedMessages() int {
	n := 0
	for _, h := range st.prods {
		for i := range h.msgs {
			if m := &h.msgs[i]; m.seenPass == st.pass && m.seenCount > 1 {
				n++
			}
		}
	}
	return n
}
