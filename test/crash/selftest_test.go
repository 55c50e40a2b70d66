package crash

import (
	"context"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
)

// The verifier's self-test: a verifier that cannot fail proves nothing, so each violation
// is planted in a fake log and must be counted.

// fakeLog is a topic in memory: the record values of each partition, offset = index.
type fakeLog [partitions][][]byte

// fetch serves batches of up to 3 records (aligned at multiples of 3, so the first batch
// can start before off, as the broker's do) from the one holding off to the end.
func (f *fakeLog) fetch(_ context.Context, part int, off int64) (int64, int64, []byte, error) {
	vals := f[part]
	var out []byte
	for b := off - off%3; b < int64(len(vals)); b += 3 {
		var bb wire.BatchBuilder
		for i := b; i < min(b+3, int64(len(vals))); i++ {
			bb.Append(1700000000000, nil, vals[i], nil)
		}
		data, err := bb.Finish(wire.CodecNone, nil)
		if err != nil {
			return 0, 0, nil, err
		}
		wire.SetBaseOffset(data, b)
		out = append(out, data...)
	}
	return int64(len(vals)), 0, out, nil
}

type selfTest struct {
	st  *history
	log fakeLog
	rng *rand.Rand
}

// send records one message of producer h in the history and, when stored, appends it to
// the log (acked messages get their offset as ack).
func (s *selfTest) send(h *prodHist, part int, st status, stored bool) []byte {
	seq := uint64(len(h.msgs))
	v := make([]byte, minPayload+s.rng.IntN(200))
	fillPayload(v, h.id, seq, s.rng.Uint64)
	h.add(msgRec{hash: maphash.Bytes(s.st.seed, v), size: int32(len(v)), part: int8(part), ackPart: -1, off: -1})
	off := int64(len(s.log[part]))
	switch st {
	case stAcked:
		h.resolve(seq, client.Ack{Partition: int32(part), Offset: off}, nil)
	case stFailed:
		h.resolve(seq, client.Ack{}, fmt.Errorf("lightq: %w (%w)", &wire.Error{Code: wire.CodeUnknownTopic}, client.ErrNotStored))
	case stIndeterminate:
		h.resolve(seq, client.Ack{}, fmt.Errorf("%w (%w)", client.ErrConnectionLost, client.ErrMaybeStored))
	case stUnsent:
		h.unsent(seq)
	}
	if stored {
		s.log[part] = append(s.log[part], v)
	}
	return v
}

// newSelfTest builds a clean history: producer 1 with 8 acked messages over both
// partitions, producer 2 with an acked one, an indeterminate one that was stored, an
// indeterminate one that was not, and one the broker refused.
func newSelfTest() *selfTest {
	s := &selfTest{st: newHistory(maphash.MakeSeed()), rng: rand.New(rand.NewPCG(1, 2))}
	p1 := s.st.newProducer(1, 0)
	for i := 0; i < 8; i++ {
		s.send(p1, i%partitions, stAcked, true)
	}
	p2 := s.st.newProducer(2, 0)
	s.send(p2, 0, stAcked, true)
	s.send(p2, 0, stIndeterminate, true)
	s.send(p2, 0, stIndeterminate, false)
	s.send(p2, 1, stFailed, false)
	return s
}

func (s *selfTest) verify(t *testing.T) report {
	t.Helper()
	var r report
	s.st.settleCycle(0, &r)
	if err := s.st.verify(context.Background(), s.log.fetch, &r); err != nil {
		t.Fatalf("verify: %v", err)
	}
	r.indetPresent = s.st.indeterminatePresent(0)
	return r
}

func TestVerifierCatches(t *testing.T) {
	cases := []struct {
		name   string
		plant  func(t *testing.T, s *selfTest) // after the history is built
		before bool                            // verify once before planting
		check  func(r report) bool
	}{
		{"clean", func(*testing.T, *selfTest) {}, false, func(r report) bool {
			return r.violations() == 0 && r.acked == 9 && r.indeterminate == 2 && r.indetPresent == 1 && r.failed == 1
		}},
		{"lost-acked", func(_ *testing.T, s *selfTest) { s.log[1] = s.log[1][:len(s.log[1])-1] }, false,
			func(r report) bool { return r.lostAcked == 1 }},
		{"phantom", func(_ *testing.T, s *selfTest) {
			v := make([]byte, 100)
			fillPayload(v, 99, 0, s.rng.Uint64)
			s.log[0] = append(s.log[0], v)
		}, false, func(r report) bool { return r.phantom == 1 }},
		{"corrupt-payload", func(_ *testing.T, s *selfTest) { s.log[0][2][40] ^= 1 }, false,
			func(r report) bool { return r.corrupt == 1 && r.lostAcked == 1 }},
		{"failed-but-present", func(_ *testing.T, s *selfTest) {
			s.send(s.st.prods[2], 1, stFailed, true)
		}, false, func(r report) bool { return r.failedPresent == 1 }},
		{"unsent-but-present", func(_ *testing.T, s *selfTest) {
			s.send(s.st.prods[2], 1, stUnsent, true)
		}, false, func(r report) bool { return r.failedPresent == 1 }},
		{"duplicate-of-acked", func(_ *testing.T, s *selfTest) {
			s.st.noDuplicates = false // counted, not refused (requireNoDuplicates false)
			s.log[1] = append(s.log[1], s.log[1][0])
		}, false,
			func(r report) bool { return r.duplicates == 1 && r.illegalDup == 0 && r.violations() == 0 }},
		{"duplicate-refused", func(_ *testing.T, s *selfTest) {
			s.st.noDuplicates = true // requireNoDuplicates: the producer is idempotent
			s.log[1] = append(s.log[1], s.log[1][0])
		}, false, func(r report) bool { return r.duplicates == 1 && r.illegalDup == 1 }},
		{"error-that-does-not-say", func(_ *testing.T, s *selfTest) {
			h := s.st.prods[2]
			seq := uint64(len(h.msgs))
			h.add(msgRec{ackPart: -1, off: -1})
			h.resolve(seq, client.Ack{}, client.ErrClosed) // neither sentinel: counted as unknown
		}, false, func(r report) bool { return r.indeterminate == 3 }},
		{"duplicate-of-indeterminate", func(_ *testing.T, s *selfTest) {
			s.st.noDuplicates = false // counted, not refused (requireNoDuplicates false)
			s.log[0] = append(s.log[0], slices.Clone(s.log[0][len(s.log[0])-1]))
		}, false, func(r report) bool { return r.duplicates == 1 && r.violations() == 0 }},
		{"order", func(_ *testing.T, s *selfTest) {
			// Swap producer 1's seq 0 and 2 in partition 0, acks included: only the order is wrong.
			l := s.log[0]
			l[0], l[1] = l[1], l[0]
			m := s.st.prods[1].msgs
			m[0].off, m[2].off = m[2].off, m[0].off
		}, false, func(r report) bool { return r.order == 1 && r.lostAcked == 0 }},
		{"rewritten-offset", func(_ *testing.T, s *selfTest) {
			// Replace the stored indeterminate message with another one.
			s.log[0][len(s.log[0])-1] = s.send(s.st.prods[2], 0, stIndeterminate, false)
		}, true, func(r report) bool { return r.inconsistent == 1 }},
		{"read-then-vanished", func(_ *testing.T, s *selfTest) { s.log[0] = s.log[0][:len(s.log[0])-1] }, true,
			func(r report) bool { return r.vanished == 1 && r.lostAcked == 0 }},
		{"live-read-vanished", func(_ *testing.T, s *selfTest) {
			var r report
			s.st.mergeLive([]liveRead{{part: 1, off: int64(len(s.log[1])) + 5, hash: 1}}, &r)
		}, false, func(r report) bool { return r.vanished == 1 }},
		{"live-read-rewritten", func(_ *testing.T, s *selfTest) {
			var r report
			s.st.mergeLive([]liveRead{{part: 1, off: 0, hash: 1}}, &r)
		}, false, func(r report) bool { return r.inconsistent == 1 }},
		{"ack-mismatch", func(_ *testing.T, s *selfTest) { s.st.prods[1].msgs[3].ackPart = 0 }, false,
			func(r report) bool { return r.ackMismatch == 1 }},
		{"no-callback", func(_ *testing.T, s *selfTest) { s.st.prods[2].msgs[2].status = stAttempted }, false,
			func(r report) bool { return r.noCallback == 1 }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newSelfTest()
			if tc.before {
				if r := s.verify(t); r.violations() != 0 {
					t.Fatalf("clean pass: %d violations: %v", r.violations(), r.problems)
				}
			}
			tc.plant(t, s)
			r := s.verify(t)
			if !tc.check(r) {
				t.Errorf("counts %+v; problems %v", r.counts, r.problems)
			}
		})
	}
}

// TestCommitVerifierCatches plants each commit violation in a fake broker's answers.
func TestCommitVerifierCatches(t *testing.T) {
	k1, k2 := commitKey{"g1", 0}, commitKey{"g2", 1}
	cases := []struct {
		name   string
		stored map[commitKey]int64
		check  func(r report) bool
	}{
		{"clean", map[commitKey]int64{k1: 10, k2: 7}, func(r report) bool { return r.violations() == 0 }},
		{"unacked-newer-stored", map[commitKey]int64{k1: 12, k2: 7}, func(r report) bool { return r.violations() == 0 }},
		{"lost", map[commitKey]int64{k1: 9, k2: 7}, func(r report) bool { return r.commitLost == 1 }},
		{"missing", map[commitKey]int64{k2: 7}, func(r report) bool { return r.commitLost == 1 }},
		{"phantom", map[commitKey]int64{k1: 10, k2: 8}, func(r report) bool { return r.commitPhantom == 1 }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newCommitHist()
			h.acked[k1], h.sent[k1] = 10, 12 // 12 sent, no answer
			h.sent[k2] = 7                   // sent, refused
			read := func(_ context.Context, group string, part int) (int64, error) {
				if off, ok := tc.stored[commitKey{group, part}]; ok {
					return off, nil
				}
				return -1, nil
			}
			var r report
			if err := h.verify(context.Background(), read, &r); err != nil {
				t.Fatal(err)
			}
			if !tc.check(r) {
				t.Errorf("counts %+v; problems %v", r.counts, r.problems)
			}
		})
	}
}
