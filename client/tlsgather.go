package client

import (
	"crypto/tls"
	"net"
	"sync"
)

// A TLS connection's writes, gathered. crypto/tls sends every record it makes with a write
// of its own: a 64 KiB flush of the client's buffer was four writes, and a large PRODUCE
// written in pieces (node.writeVectored) was a record per piece, the 5-byte frame header
// among them, each with its own write. tlsConn makes one tls.Conn.Write (or one vectored
// frame) a single write of all its records, up to gatherMax bytes at a time, and packs a
// vectored frame's pieces into full records.

// gatherMax bounds the records sent with one write.
const gatherMax = 256 << 10

// maxRecordPlain is the most plaintext one TLS record carries (RFC 8446 section 5.1).
const maxRecordPlain = 16 << 10

// tlsConn is the net.Conn a TLS link uses: the tls.Conn, with Write and writeBuffers that
// gather. Like any link's connection, its writes come from one goroutine at a time (the
// node's writer lock); reads from the link's reader.
type tlsConn struct {
	*tls.Conn
	g     *gatherConn
	stage []byte // writeBuffers' plaintext of the record being packed
}

func newTLSConn(nc net.Conn, g *gatherConn, cfg *tls.Config) *tlsConn {
	return &tlsConn{Conn: tls.Client(nc, cfg), g: g}
}

// Write encrypts p and sends its records with one write per gatherMax bytes.
func (c *tlsConn) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		n := min(len(p), gatherMax)
		c.g.begin()
		_, err := c.Conn.Write(p[:n])
		if ferr := c.g.end(); err == nil {
			err = ferr
		}
		if err != nil {
			return written, err
		}
		written += n
		p = p[n:]
	}
	return written, nil
}

// writeBuffers writes the pieces of v as one stream, in full records where it can: whole
// records straight from a piece, the rest packed through stage, so that a frame header does
// not become a record of its own. It sends one write per gatherMax bytes of records.
func (c *tlsConn) writeBuffers(v *net.Buffers) error {
	c.g.begin()
	var err error
	put := func(b []byte) {
		if err == nil {
			_, err = c.Conn.Write(b)
		}
		if err == nil && c.g.buffered() >= gatherMax {
			err = c.g.send()
		}
	}
	for _, b := range *v {
		for len(b) > 0 && err == nil {
			if len(c.stage) == 0 && len(b) >= maxRecordPlain {
				n := min(len(b)-len(b)%maxRecordPlain, gatherMax)
				put(b[:n])
				b = b[n:]
				continue
			}
			if c.stage == nil {
				c.stage = make([]byte, 0, maxRecordPlain)
			}
			n := min(len(b), maxRecordPlain-len(c.stage))
			c.stage = append(c.stage, b[:n]...)
			b = b[n:]
			if len(c.stage) == maxRecordPlain {
				put(c.stage)
				c.stage = c.stage[:0]
			}
		}
	}
	if len(c.stage) > 0 {
		put(c.stage)
		c.stage = c.stage[:0]
	}
	*v = (*v)[:0]
	if ferr := c.g.end(); err == nil {
		err = ferr
	}
	return err
}

// gatherConn is the TCP connection under a tlsConn. Between begin and end the records
// crypto/tls writes are appended to buf and sent by send or end. crypto/tls may also write
// from the reading goroutine (a KeyUpdate answer) and at Close: mu orders those with the
// gathering, and crypto/tls's own lock keeps records in sequence.
type gatherConn struct {
	net.Conn
	mu        sync.Mutex
	gathering bool
	buf       []byte
}

func (g *gatherConn) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gathering {
		g.buf = append(g.buf, p...)
		return len(p), nil
	}
	return g.Conn.Write(p)
}

func (g *gatherConn) begin() {
	g.mu.Lock()
	g.gathering = true
	g.mu.Unlock()
}

func (g *gatherConn) buffered() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.buf)
}

// send writes what was gathered with one write (Go's Write loops until all is written).
func (g *gatherConn) send() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.sendLocked()
}

func (g *gatherConn) sendLocked() error {
	if len(g.buf) == 0 {
		return nil
	}
	_, err := g.Conn.Write(g.buf)
	if cap(g.buf) > 2*gatherMax {
		g.buf = nil // one oversized write: do not keep its buffer
	} else {
		g.buf = g.buf[:0]
	}
	return err
}

// end sends what was gathered and stops gathering.
func (g *gatherConn) end() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gathering = false
	return g.sendLocked()
}
