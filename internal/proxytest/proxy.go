// Package proxytest is a loopback TCP forwarder for tests of reconnecting clients: it gives
// a client one address across broker restarts, where each broker listens on a port of its
// own (127.0.0.1:0), so that no port is freed and reused (and lost to another process in
// between). Only tests import it.
//
//	p := proxytest.Start(t)
//	p.SetBackend(srv.Addr())   // connections made to p.Addr() go to srv
//	p.SetBackend("")           // new connections are closed at once, as a stopped broker's port refuses
//	p.Cut()                    // every open connection is closed abruptly (RST), as after kill -9
//	p.Freeze()                 // nothing more is forwarded either way, as to a SIGSTOPped broker
//	p.Thaw()                   // forwarding goes on, as after SIGCONT
//
// Safe for concurrent use.
package proxytest

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy forwards the connections made to its listener to its current backend.
type Proxy struct {
	ln      net.Listener
	wg      sync.WaitGroup
	mu      sync.Mutex
	backend string
	conns   map[net.Conn]struct{}
	accepts int
	thaw    chan struct{} // non-nil while frozen: closed by Thaw
	in      atomic.Int64  // bytes forwarded from clients to the backend
}

// Start listens on 127.0.0.1:0; t.Cleanup closes everything.
func Start(t testing.TB) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, conns: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.Cut()
		p.Thaw()
		p.wg.Wait()
	})
	return p
}

// Addr is the address clients dial.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetBackend makes new connections go to addr ("": none, they are closed at once).
func (p *Proxy) SetBackend(addr string) {
	p.mu.Lock()
	p.backend = addr
	p.mu.Unlock()
}

// Accepted is the number of connections accepted so far.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepts
}

// BytesIn is the number of bytes forwarded from clients to backends so far: a test can tell
// that a request has left the client.
func (p *Proxy) BytesIn() int64 { return p.in.Load() }

// countingReader counts what it reads into n.
type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c countingReader) Read(b []byte) (int, error) {
	k, err := c.r.Read(b)
	c.n.Add(int64(k))
	return k, err
}

// Freeze stops forwarding, both ways, on every connection, open or accepted from now on, as
// a stopped (SIGSTOP) broker's sockets do: they stay open, what a client writes waits in
// buffers (the forwarder reads nothing more), nothing comes back, and a new connection is
// accepted but goes no further. A connection Cut while frozen is closed at once; its
// forwarding goroutines end at Thaw (or at the test's end).
func (p *Proxy) Freeze() {
	p.mu.Lock()
	if p.thaw == nil {
		p.thaw = make(chan struct{})
	}
	p.mu.Unlock()
}

// Thaw forwards again what waited, and everything after, as SIGCONT lets a broker go on.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	if p.thaw != nil {
		close(p.thaw)
		p.thaw = nil
	}
	p.mu.Unlock()
}

// awaitThaw returns once the proxy is not frozen.
func (p *Proxy) awaitThaw() {
	p.mu.Lock()
	ch := p.thaw
	p.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

// forward copies src to dst, holding each read and each write while the proxy is frozen.
func (p *Proxy) forward(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		p.awaitThaw()
		n, err := src.Read(buf)
		if n > 0 {
			p.awaitThaw()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Cut closes every forwarded connection abruptly: the client side is reset (SO_LINGER 0),
// so that what the client had not read yet is gone, as when a broker is killed.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for nc := range p.conns {
		if tc, ok := nc.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		nc.Close()
	}
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		front, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.accepts++
		backend := p.backend
		p.mu.Unlock()
		var back net.Conn
		if backend != "" {
			back, err = net.Dial("tcp", backend)
		}
		if back == nil || err != nil {
			front.Close()
			continue
		}
		p.mu.Lock()
		p.conns[front], p.conns[back] = struct{}{}, struct{}{}
		p.mu.Unlock()
		pipe := func(dst, src net.Conn, r io.Reader) {
			defer p.wg.Done()
			p.forward(dst, r)
			dst.Close()
			src.Close()
			p.mu.Lock()
			delete(p.conns, dst)
			delete(p.conns, src)
			p.mu.Unlock()
		}
		p.wg.Add(2)
		go pipe(back, front, countingReader{front, &p.in})
		go pipe(front, back, back)
	}
}
