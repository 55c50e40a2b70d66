package client

import "context"

// The queue between the fetchers and Each: chunks (FETCH answers, verified and decompressed)
// in arrival order, bounded per partition by Prefetch bytes, and recycled with their memory.

// chunk is one FETCH response: the raw body, the decompressed records of its compressed
// batches, and where each batch's records are. A chunk with err set carries a fatal error in
// the partition's order instead.
type chunk struct {
	p       *partState
	gen     uint64
	raw     []byte
	dec     []byte
	batches []batchRef
	size    int // bytes accounted in p.buffered
	err     error
}

// batchRef is where one batch's records are in a chunk, or, with bad set, a batch that
// failed its checks, which Each reaches in its place in the partition's order; with control
// set, a control batch (no records), which Each passes, moving the position past its offset.
type batchRef struct {
	base, firstTS int64
	count         uint32
	inDec         bool
	control       bool
	start, end    int
	bad           *CorruptBatchError
}

func (ch *chunk) records(b *batchRef) []byte {
	if b.inDec {
		return ch.dec[b.start:b.end]
	}
	return ch.raw[b.start:b.end]
}

// maxFreeChunks bounds the chunks a partition keeps for reuse.
const maxFreeChunks = 8

// getChunk returns a free chunk of p, for the current generation.
func (k *Consumer) getChunk(p *partState) *chunk {
	k.mu.Lock()
	defer k.mu.Unlock()
	var ch *chunk
	if n := len(p.free); n > 0 {
		ch = p.free[n-1]
		p.free[n-1] = nil
		p.free = p.free[:n-1]
	} else {
		ch = &chunk{p: p}
	}
	ch.gen = p.gen
	return ch
}

// recycleLocked takes back a chunk's accounted bytes and keeps it for reuse.
func (k *Consumer) recycleLocked(ch *chunk) {
	p := ch.p
	if p == nil {
		return
	}
	p.buffered -= ch.size
	ch.size = 0
	ch.raw, ch.dec, ch.batches = ch.raw[:0], ch.dec[:0], ch.batches[:0]
	if len(p.free) < maxFreeChunks && !k.closed.Load() {
		p.free = append(p.free, ch)
	}
	select {
	case p.space <- struct{}{}:
	default:
	}
}

func (k *Consumer) recycle(ch *chunk) {
	k.mu.Lock()
	k.recycleLocked(ch)
	k.mu.Unlock()
}

// account adds n bytes to ch and its partition; it reports whether the partition still has
// room for another FETCH.
func (k *Consumer) account(ch *chunk, n int) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	ch.size += n
	ch.p.buffered += n
	return ch.p.buffered < k.opts.Prefetch
}

// waitSpace waits until p holds less than Prefetch bytes.
func (k *Consumer) waitSpace(s *session, p *partState) bool {
	for {
		k.mu.Lock()
		ok := p.buffered < k.opts.Prefetch
		k.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-p.space:
		case <-s.ctx.Done():
			return false
		}
	}
}

// enqueue hands a processed chunk (or a fatal error) to Each.
func (k *Consumer) enqueue(ch *chunk) {
	k.mu.Lock()
	k.queue = append(k.queue, ch)
	k.mu.Unlock()
	select {
	case k.signal <- struct{}{}:
	default:
	}
}

// enqueueFatal queues err after what p (nil: any) has queued; Each returns it when it gets
// there and the consumer ends.
func (k *Consumer) enqueueFatal(p *partState, err error) {
	k.enqueue(&chunk{p: p, err: err})
}

// pop waits for the next chunk to consume. It returns the terminal error once the consumer
// is closed or has reached a fatal error.
func (k *Consumer) pop(ctx context.Context) (*chunk, error) {
	for {
		if k.revokeReq.Load() {
			k.applyRevoke()
		}
		k.mu.Lock()
		if k.err != nil {
			err := k.err
			k.mu.Unlock()
			return nil, err
		}
		for k.head < len(k.queue) {
			ch := k.queue[k.head]
			k.queue[k.head] = nil
			k.head++
			if k.head == len(k.queue) {
				k.queue, k.head = k.queue[:0], 0
			} else if k.head > 64 && k.head > len(k.queue)/2 {
				n := copy(k.queue, k.queue[k.head:])
				clear(k.queue[n:])
				k.queue, k.head = k.queue[:n], 0
			}
			if ch.err != nil {
				k.err = ch.err
				k.mu.Unlock()
				k.cancel() // stop fetching: the consumer is over
				return nil, ch.err
			}
			if ch.gen != ch.p.gen {
				k.recycleLocked(ch)
				continue
			}
			k.mu.Unlock()
			return ch, nil
		}
		k.mu.Unlock()
		select {
		case <-k.signal:
		case <-k.closing:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
