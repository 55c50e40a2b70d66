package tlsfront

import (
	"io"
	"sync"
)

// Pipe carries one session's plaintext between its goroutines and the event loop that serves
// the connection, in memory: up appends what it decrypted to the inbox, the loop reads frames
// from it where they lie; the loop appends its output to the outbox, down takes it a chunk at
// a time, encrypts it and sends it. Before, a socket pair carried it, and every byte crossed
// the kernel twice each way (a write and a read on each side), which cost the broker about a
// third of its CPU in the TLS benchmark (docs/DESIGN.md, "TLS").
//
// The socket pair stays for the connection's life: gnet can only enroll a descriptor, and its
// close is how the loop learns that a session ended and the session that the broker closed
// (Session.BrokerClosed). No plaintext crosses it.
//
// Concurrency. The loop side (BeginTurn, EndTurn, InputEnded, InboundBuffered, Peek,
// Discard, Read, Write, Writev, OutboundBuffered) belongs to the connection's event loop, the one goroutine that may call it
// (gnet's rule for a conn's own methods); up and down are the session's goroutines; Attach is
// called once, on the loop, before the session pumps. inMu guards the inbox, outMu the
// outbox; neither is held while calling out (wake), so they are leaves.
//
// Views. Peek returns a view into the inbox, valid until the next Discard or Read and the end
// of the turn, as gnet's Peek is valid until Discard or the end of the callback; the loop may
// write into it (a durable PRODUCE stamps its base offset in place). Within a turn
// (BeginTurn, EndTurn) up only appends past the pending bytes; it moves them (to the front,
// or to a larger buffer) only between turns. The loop itself moves them when it consumed
// past the middle, and recycles the buffer once drained.
type Pipe struct {
	wake      func() // the loop's wake (Attach); safe from any goroutine
	highWater int    // the broker's high-water mark: output at it waits for the drain's wake

	inMu      sync.Mutex
	in        *[]byte // pooled; the pending input is (*in)[inR:inW]; nil while none is pending
	inR, inW  int
	inTurn    bool          // the loop is in a turn (BeginTurn): it may hold views into in
	inEnded   bool          // the client's side ended: no more input comes
	inGone    bool          // the broker closed: input is dropped
	inLimit   int           // up waits while this much is pending (a whole frame always fits)
	upWaiting bool          // up waits for room; the loop signals inRoom once it made some
	inRoom    chan struct{} // cap 1

	outMu     sync.Mutex
	outQ      []*[]byte // pooled chunks of outChunk bytes in order; the last has outTail bytes
	outTail   int
	outN      int  // bytes in outQ
	sending   int  // bytes down took and has not sent yet
	outClosed bool // the broker closed its side: down sends what is left, then ends
	drainWake bool // the loop saw the output at the high-water mark: wake it when it drains
	outReady  chan struct{}
}

// inboxMin is the smallest inbox buffer: a read of several records.
const inboxMin = 64 << 10

// outChunk is the size of the outbox's chunks: what down encrypts and sends at once.
const outChunk = downRead

func newPipe(inLimit int) *Pipe {
	return &Pipe{
		inLimit:  max(inLimit, inboxMin),
		inRoom:   make(chan struct{}, 1),
		outReady: make(chan struct{}, 1),
	}
}

// Attach gives the pipe the loop's wake, called when input arrives, when the input ends and
// when output at the high-water mark has drained; highWater is that mark. Call it once, on the
// loop, before the session pumps (in OnOpen: Hooks.Enroll returns only after it).
func (p *Pipe) Attach(wake func(), highWater int) {
	p.wake, p.highWater = wake, highWater
}

// signal makes a non-blocking send on a channel of capacity 1: a pending signal is enough.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// ---- the inbox: up appends, the loop reads ----

// push appends b, plaintext from the client, to the inbox and wakes the loop. While inLimit
// bytes are pending it waits for the loop to take some: the client then waits on TCP, as it
// would on a full socket. Once the broker closed, input is dropped. Up's goroutine only.
func (p *Pipe) push(b []byte) {
	if len(b) == 0 {
		return
	}
	p.inMu.Lock()
	for {
		pending := p.inW - p.inR
		switch {
		case p.inGone:
			p.inMu.Unlock()
			return
		case pending >= p.inLimit:
			// wait (below)
		case p.in == nil:
			p.in = getBufAtLeast(max(len(b), inboxMin))
			p.inR, p.inW = 0, 0
		case p.inW+len(b) <= len(*p.in):
		case p.inTurn:
			// No room after the pending bytes, and the loop may hold views into them (and
			// write into them: a durable PRODUCE stamps its base offset in place): wait for
			// the turn's end before moving them.
		case pending+len(b) > len(*p.in):
			// Too small: move the pending bytes to a larger buffer, one that holds a whole
			// frame at once (each step of a doubling would copy them again).
			nb := getBufAtLeast(max(pending+len(b), p.inLimit+inboxMin))
			copy(*nb, (*p.in)[p.inR:p.inW])
			putBuf(p.in)
			p.in, p.inR, p.inW = nb, 0, pending
		default:
			// Room before the pending bytes: move them to the front.
			p.inW = copy(*p.in, (*p.in)[p.inR:p.inW])
			p.inR = 0
		}
		if pending < p.inLimit && p.in != nil && p.inW+len(b) <= len(*p.in) {
			break
		}
		// At the limit, or waiting for the turn's end: until the loop takes some input or
		// ends its turn.
		p.upWaiting = true
		p.inMu.Unlock()
		<-p.inRoom
		p.inMu.Lock()
	}
	p.inW += copy((*p.in)[p.inW:], b)
	p.inMu.Unlock()
	p.wake()
}

// endInput records that the client's side ended and wakes the loop, which closes the
// connection once it took what arrived before (InputEnded). Up's goroutine only.
func (p *Pipe) endInput() {
	p.inMu.Lock()
	p.inEnded = true
	p.inMu.Unlock()
	p.wake()
}

// BeginTurn tells the pipe that the loop may take views into the inbox (Peek), and write
// into them, until EndTurn: up neither moves nor reads the pending bytes meanwhile. Loop only.
func (p *Pipe) BeginTurn() {
	p.inMu.Lock()
	p.inTurn = true
	p.inMu.Unlock()
}

// EndTurn ends what BeginTurn began: the loop holds no view any more, so up, if it waits for
// room, may move the pending bytes now (BeginTurn waits for inMu meanwhile). Loop only.
func (p *Pipe) EndTurn() {
	p.inMu.Lock()
	p.inTurn = false
	if p.upWaiting {
		p.upWaiting = false
		signal(p.inRoom)
	}
	p.inMu.Unlock()
}

// InputEnded reports whether the client's side ended: no more input will arrive. Loop only.
func (p *Pipe) InputEnded() bool {
	p.inMu.Lock()
	defer p.inMu.Unlock()
	return p.inEnded
}

// InboundBuffered is how many input bytes are pending. Loop only.
func (p *Pipe) InboundBuffered() int {
	p.inMu.Lock()
	defer p.inMu.Unlock()
	return p.inW - p.inR
}

// Peek returns the next n pending input bytes (all of them for n <= 0) without consuming
// them, valid until the next Discard or Read; with fewer pending it returns those and
// io.ErrShortBuffer, as gnet's Peek. Loop only.
func (p *Pipe) Peek(n int) ([]byte, error) {
	p.inMu.Lock()
	defer p.inMu.Unlock()
	pending := p.inW - p.inR
	if pending == 0 {
		if n <= 0 {
			return nil, nil
		}
		return nil, io.ErrShortBuffer
	}
	if n <= 0 {
		n = pending
	}
	if n > pending {
		return (*p.in)[p.inR:p.inW], io.ErrShortBuffer
	}
	return (*p.in)[p.inR : p.inR+n], nil
}

// Discard drops the next n pending input bytes (at most those pending) and returns how many
// it dropped. Loop only.
func (p *Pipe) Discard(n int) int {
	p.inMu.Lock()
	defer p.inMu.Unlock()
	n = max(min(n, p.inW-p.inR), 0)
	p.consumed(n)
	return n
}

// Read moves pending input into b and returns how many bytes it moved. Loop only.
func (p *Pipe) Read(b []byte) int {
	p.inMu.Lock()
	defer p.inMu.Unlock()
	if p.in == nil {
		return 0
	}
	n := copy(b, (*p.in)[p.inR:p.inW])
	p.consumed(n)
	return n
}

// consumed advances past n input bytes the loop took. Views are invalid from here on, so it
// may recycle the buffer once drained, or move a remainder to its front once past its middle.
// Caller holds inMu.
func (p *Pipe) consumed(n int) {
	p.inR += n
	switch {
	case p.in == nil:
	case p.inR == p.inW:
		putBuf(p.in) // an idle session holds no buffer
		p.in, p.inR, p.inW = nil, 0, 0
	case p.inR > len(*p.in)/2:
		p.inW = copy(*p.in, (*p.in)[p.inR:p.inW])
		p.inR = 0
	}
	if p.upWaiting && p.inW-p.inR < p.inLimit {
		p.upWaiting = false
		signal(p.inRoom)
	}
}

// ---- the outbox: the loop appends, down sends ----

// Write appends b to the output. Loop only; it never fails (once the broker closed, output
// is dropped: nothing writes after OnClose).
func (p *Pipe) Write(b []byte) int {
	p.outMu.Lock()
	p.appendOut(b)
	p.outMu.Unlock()
	signal(p.outReady)
	return len(b)
}

// Writev appends every slice of bs to the output, in order. Loop only.
func (p *Pipe) Writev(bs [][]byte) int {
	p.outMu.Lock()
	n := 0
	for _, b := range bs {
		p.appendOut(b)
		n += len(b)
	}
	p.outMu.Unlock()
	signal(p.outReady)
	return n
}

// appendOut appends b to the outbox's chunks, taking new ones from the pool: output is
// never moved once written. Caller holds outMu.
func (p *Pipe) appendOut(b []byte) {
	if p.outClosed {
		return
	}
	for len(b) > 0 {
		if len(p.outQ) == 0 || p.outTail == outChunk {
			p.outQ = append(p.outQ, getBuf(outChunk))
			p.outTail = 0
		}
		n := copy((*p.outQ[len(p.outQ)-1])[p.outTail:outChunk], b)
		p.outTail += n
		p.outN += n
		b = b[n:]
	}
}

// OutboundBuffered is how many output bytes are not sent yet, down's included. At the
// high-water mark it asks down for a wake once they drain below it. Loop only.
func (p *Pipe) OutboundBuffered() int {
	p.outMu.Lock()
	defer p.outMu.Unlock()
	n := p.outN + p.sending
	if n >= p.highWater {
		p.drainWake = true
	}
	return n
}

// take waits for output and takes its first chunk: a buffer to give back to the pool once
// sent, and how many of its bytes to send; or nil once the broker closed and everything was
// taken. Down's goroutine only.
func (p *Pipe) take() (*[]byte, int) {
	for {
		p.outMu.Lock()
		if len(p.outQ) > 0 {
			b, n := p.outQ[0], outChunk
			if len(p.outQ) == 1 {
				n = p.outTail // the loop starts a new chunk with its next write
			}
			copy(p.outQ, p.outQ[1:])
			p.outQ[len(p.outQ)-1] = nil
			p.outQ = p.outQ[:len(p.outQ)-1]
			p.outN -= n
			p.sending += n
			p.outMu.Unlock()
			return b, n
		}
		closed := p.outClosed
		p.outMu.Unlock()
		if closed {
			return nil, 0
		}
		<-p.outReady
	}
}

// sent records that down sent n more of what it took, and wakes the loop when output it saw
// at the high-water mark drained below it. Down's goroutine only.
func (p *Pipe) sent(n int) {
	p.outMu.Lock()
	p.sending -= n
	wake := p.drainWake && p.outN+p.sending < p.highWater
	if wake {
		p.drainWake = false
	}
	p.outMu.Unlock()
	if wake {
		p.wake()
	}
}

// close ends the pipe from the broker's side: input is dropped from now on (up stops
// waiting for room), and down sends the output left and ends. Safe from any goroutine;
// idempotent.
func (p *Pipe) close() {
	p.inMu.Lock()
	p.inGone = true
	p.inMu.Unlock()
	signal(p.inRoom)
	p.outMu.Lock()
	p.outClosed = true
	p.outMu.Unlock()
	signal(p.outReady)
}
