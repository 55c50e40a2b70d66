package tlsfront

import (
	"bytes"
	"io"
	"math/rand"
	"sync"
	"testing"
)

// loopSide plays the event loop of a Pipe in tests: it waits for wakes and serves the pipe's
// loop side from one goroutine.
type loopSide struct {
	p     *Pipe
	wakes chan struct{}
}

func newLoopSide(limit, highWater int) *loopSide {
	l := &loopSide{p: newPipe(limit), wakes: make(chan struct{}, 1)}
	l.p.Attach(func() { signal(l.wakes) }, highWater)
	return l
}

// TestPipeInboxCarriesBytesExactly: input pushed in pieces of every size, while the loop
// takes it with Peek, Discard and Read in pieces of other sizes (the way the broker reads
// frames), arrives in order and unchanged, and the inbox gives its buffer back once drained.
func TestPipeInboxCarriesBytesExactly(t *testing.T) {
	const total = 8 << 20
	l := newLoopSide(1500<<10, 1<<20)
	src := make([]byte, total)
	rand.New(rand.NewSource(1)).Read(src)
	go func() {
		rng := rand.New(rand.NewSource(2))
		for off := 0; off < total; {
			n := min(1+rng.Intn(700<<10), total-off)
			l.p.push(src[off : off+n])
			off += n
		}
		l.p.endInput()
	}()
	rng := rand.New(rand.NewSource(3))
	var got bytes.Buffer
	scratch := make([]byte, 200<<10)
	for got.Len() < total {
		buffered := l.p.InboundBuffered()
		if buffered == 0 {
			if l.p.InputEnded() && l.p.InboundBuffered() == 0 {
				break
			}
			<-l.wakes
			continue
		}
		want := 1 + rng.Intn(150<<10)
		// Views only inside a turn (BeginTurn); outside one up may move the pending bytes,
		// and only Read is used.
		turn, op := rng.Intn(2) == 0, 2
		if turn {
			l.p.BeginTurn()
			op = rng.Intn(3)
		}
		switch op {
		case 0: // Peek then Discard, as readFrames
			if want > buffered {
				if v, err := l.p.Peek(want); err != io.ErrShortBuffer || len(v) < buffered {
					t.Fatalf("Peek(%d) of %d: %d bytes, %v", want, buffered, len(v), err)
				}
				break
			}
			v, err := l.p.Peek(want)
			if err != nil || len(v) != want {
				t.Fatalf("Peek(%d): %d bytes, %v", want, len(v), err)
			}
			got.Write(v)
			v[0], v[len(v)-1] = 0, 0 // the loop may write into a view (the race detector checks up keeps off)
			if n := l.p.Discard(want); n != want {
				t.Fatalf("Discard(%d) = %d", want, n)
			}
		case 1: // a header peeked, then Read into a destination, as produceDirect
			h := min(want, 40)
			v, _ := l.p.Peek(h)
			head := append([]byte(nil), v...)
			got.Write(head)
			l.p.Discard(len(head))
			n := l.p.Read(scratch[:min(want, len(scratch))])
			got.Write(scratch[:n])
		case 2:
			got.Write(scratch[:l.p.Read(scratch[:min(want, len(scratch))])])
		}
		if turn {
			l.p.EndTurn()
		}
	}
	if !bytes.Equal(got.Bytes(), src) {
		i := 0
		for i < min(got.Len(), total) && got.Bytes()[i] == src[i] {
			i++
		}
		t.Fatalf("got %d bytes, first difference at %d", got.Len(), i)
	}
	if l.p.in != nil {
		t.Fatal("the drained inbox holds a buffer")
	}
}

// TestPipeInboxBounded: up waits while inLimit bytes are pending and goes on once the loop
// takes some; once the broker closed, pushes return at once and are dropped.
func TestPipeInboxBounded(t *testing.T) {
	l := newLoopSide(64<<10, 1<<20)
	l.p.push(make([]byte, 64<<10))
	pushed := make(chan struct{})
	go func() { l.p.push(make([]byte, 10)); close(pushed) }()
	select {
	case <-pushed:
		t.Fatal("a push past the limit did not wait")
	default:
	}
	l.p.Discard(1)
	<-pushed
	if n := l.p.InboundBuffered(); n != 64<<10-1+10 {
		t.Fatalf("%d bytes pending", n)
	}
	blocked := make(chan struct{})
	go func() { l.p.push(make([]byte, 10)); close(blocked) }()
	l.p.close()
	<-blocked
	l.p.push([]byte("dropped"))
	if n := l.p.InboundBuffered(); n != 64<<10-1+10 {
		t.Fatalf("%d bytes pending after the close", n)
	}
}

// TestPipeOutbox: output written with Write and Writev is taken by down whole and in order;
// OutboundBuffered counts what down has not sent, and the loop is woken once output it saw
// at the high-water mark drained; after the close, down gets what is left, then the end.
func TestPipeOutbox(t *testing.T) {
	l := newLoopSide(1<<20, 100)
	l.p.Write([]byte("hello "))
	l.p.Writev([][]byte{[]byte("wor"), nil, []byte("ld")})
	if n := l.p.OutboundBuffered(); n != 11 {
		t.Fatalf("OutboundBuffered = %d", n)
	}
	b, n := l.p.take()
	if string((*b)[:n]) != "hello world" {
		t.Fatalf("took %q", (*b)[:n])
	}
	putBuf(b)
	if got := l.p.OutboundBuffered(); got != 11 {
		t.Fatalf("OutboundBuffered while sending = %d", got)
	}
	big := bytes.Repeat([]byte{7}, 200<<10) // past the initial buffer: it grows
	l.p.Write(big)
	if got := l.p.OutboundBuffered(); got != 11+len(big) {
		t.Fatalf("OutboundBuffered = %d", got) // and asks for the drain's wake
	}
	l.p.sent(11)
	select {
	case <-l.wakes:
		t.Fatal("woken while still over the high-water mark")
	default:
	}
	var took []byte
	for len(took) < len(big) { // in chunks of outChunk
		b, n = l.p.take()
		if n > outChunk {
			t.Fatalf("took a chunk of %d bytes", n)
		}
		took = append(took, (*b)[:n]...)
		putBuf(b)
		l.p.sent(n)
	}
	if !bytes.Equal(took, big) {
		t.Fatalf("took %d other bytes", len(took))
	}
	select {
	case <-l.wakes:
	default:
		t.Fatal("not woken once drained")
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		b, n := l.p.take()
		if b == nil || string((*b)[:n]) != "last" {
			t.Errorf("took %v %d, want the last output", b, n)
			return
		}
		if b, _ := l.p.take(); b != nil {
			t.Error("output after the close")
		}
	}()
	l.p.Write([]byte("last"))
	l.p.close()
	l.p.Write([]byte("after the close"))
	wg.Wait()
}

// FuzzPipeInbox: whatever the pieces input arrives in and the pieces the loop takes it in
// (Peek and Discard, Read, inside a turn or not), the loop reads the stream unchanged, and a
// drained inbox holds no buffer. ops drives the sizes: each byte is one push or one take.
func FuzzPipeInbox(f *testing.F) {
	f.Add([]byte("hello, world: the quick brown fox"), []byte{3, 0x85, 7, 0x81, 200, 0xff, 0x40})
	f.Add(bytes.Repeat([]byte{1, 2, 3}, 3000), []byte{0xff, 0x20, 0xfe, 0x7f, 0x90})
	f.Fuzz(func(t *testing.T, data, ops []byte) {
		l := newLoopSide(1<<20, 1<<20) // data stays below the limit: pushes never wait
		var got []byte
		in, scratch := data, make([]byte, 16<<10)
		take := func(n int, mode byte) {
			switch mode % 3 {
			case 0:
				l.p.BeginTurn()
				if v, err := l.p.Peek(n); err == nil {
					got = append(got, v...)
					l.p.Discard(len(v))
				}
				l.p.EndTurn()
			case 1:
				got = append(got, scratch[:l.p.Read(scratch[:n])]...)
			case 2:
				l.p.BeginTurn()
				got = append(got, scratch[:l.p.Read(scratch[:n])]...)
				l.p.EndTurn()
			}
		}
		for _, op := range ops {
			n := int(op&0x7f)*int(op&0x7f) + 1 // 1 .. 16130 bytes
			if op&0x80 == 0 && len(in) > 0 {
				n = min(n, len(in))
				l.p.push(in[:n])
				in = in[n:]
			} else {
				take(n, op)
			}
		}
		l.p.push(in)
		for l.p.InboundBuffered() > 0 {
			take(16<<10, 1)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("read %d bytes of %d, or other bytes", len(got), len(data))
		}
		if l.p.in != nil {
			t.Fatal("the drained inbox holds a buffer")
		}
	})
}
