package client

// Inline handlers (SubscribeOptions.InlineHandler): while Each waits for a batch, it lends
// its handler to the connection's reader goroutine, which then decodes a batch it has just
// read and calls the handler itself, instead of queueing the batch and waking the
// goroutine in Each. That saves a goroutine hand-off per batch, often a thread wake-up on
// another CPU: at a low rate, where every batch is a message or a few, a measurable part of
// the end-to-end latency.
//
// Ownership: the consumer state (s.cur, s.it, s.rec, s.recv, s.comp, s.consumed, ...)
// belongs to the goroutine in Each, which holds consumeMu. Each lends it with the handler
// (s.lent, under s.mu) only when no batch is current and the queue is empty, and parks in
// pop. The reader takes it (s.busy) only while lent and the queue is empty, so batches keep
// their order. Each takes it back in reclaim: it clears lent and waits until busy is false.
// The hand-overs go through s.mu, which orders the accesses on both sides.
//
// The reader gives the handler back (lent false, a signal to Each) when the handler fails
// (Each returns the error; the batch stays current, so the next Each resumes after that
// message) or a batch does not decode (it is queued, or stays current, for Each to deal with
// as without the option, OnCorruptBatch included).

// runLent runs the lent handler on batch q, on the reader goroutine. s.mu is held, s.lent
// is set and the queue is empty; runLent unlocks s.mu.
func (s *Subscription) runLent(q queuedBatch) {
	s.busy = true
	fn := s.lentFn
	s.mu.Unlock()

	giveBack := false
	var herr error
	if bad := s.open(q); bad != nil {
		// Let Each's goroutine skip it (and report it) as usual, unless Close came first.
		s.mu.Lock()
		if s.err == nil {
			s.queue = append(s.queue, q)
		}
		s.mu.Unlock()
		giveBack = true
	} else if herr = s.records(fn); herr != nil || s.it.Err() != nil {
		giveBack = true // the batch stays current: Each returns herr, or handles the damage
	} else {
		s.release(q)
	}
	s.inlineN.Add(1)

	s.mu.Lock()
	s.busy = false
	if giveBack {
		s.lent, s.lentFn = false, nil
		if herr != nil {
			s.inlineErr = herr
		}
	}
	s.mu.Unlock()
	select {
	case s.idle <- struct{}{}:
	default:
	}
	if giveBack {
		select {
		case s.signal <- struct{}{}:
		default:
		}
	}
}

// reclaim takes the consumer state back from the reader: nothing more is lent, and a batch
// the reader is handling is finished first. It runs on the goroutine in Each.
func (s *Subscription) reclaim() {
	s.mu.Lock()
	s.lent, s.lentFn = false, nil
	for s.busy {
		s.mu.Unlock()
		<-s.idle
		s.mu.Lock()
	}
	s.mu.Unlock()
	select { // a stale token would only cost one loop; drop it
	case <-s.idle:
	default:
	}
}
