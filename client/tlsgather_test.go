package client

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"io"
	"math/rand"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lightq/lightq/internal/certgen"
)

// countingConn counts the writes that reach the socket.
type countingConn struct {
	net.Conn
	writes atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// TestTLSConnGathers: a tlsConn's Write and writeBuffers deliver their bytes exactly and in
// order, with one socket write per gatherMax bytes of records (not one per record), and a
// vectored frame's small pieces do not become records of their own.
func TestTLSConnGathers(t *testing.T) {
	ca, err := certgen.NewCA("gather test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile, err := ca.WriteFiles(dir, "server", certgen.ServerLeaf(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// The server counts the records it receives: it reads through a record-header parser.
	type result struct {
		data    []byte
		records int
		err     error
	}
	done := make(chan result, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			done <- result{err: err}
			return
		}
		defer nc.Close()
		rc := &recordCounter{Conn: nc}
		sc := tls.Server(rc, &tls.Config{Certificates: []tls.Certificate{pair}})
		data, err := io.ReadAll(sc)
		done <- result{data: data, records: rc.records, err: err}
	}()
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	cc := &countingConn{Conn: nc}
	g := &gatherConn{Conn: cc}
	c := newTLSConn(g, g, &tls.Config{RootCAs: pool, ServerName: "localhost", DynamicRecordSizingDisabled: true})
	if err := c.Handshake(); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(1))
	var sent bytes.Buffer
	cc.writes.Store(0)
	var wantWrites int64
	var wantRecords int
	// A vectored frame: a header, a produce header and a large batch.
	hdr, phdr, batch := make([]byte, 12), make([]byte, 30), make([]byte, 600<<10)
	for _, b := range [][]byte{hdr, phdr, batch} {
		rng.Read(b)
		sent.Write(b)
	}
	v := net.Buffers{hdr, phdr, batch}
	if err := c.writeBuffers(&v); err != nil {
		t.Fatal(err)
	}
	total := len(hdr) + len(phdr) + len(batch)
	wantRecords += (total + maxRecordPlain - 1) / maxRecordPlain // packed full
	wantWrites += int64((total + gatherMax - 1) / gatherMax)
	if got := cc.writes.Load(); got > wantWrites {
		t.Errorf("writeBuffers of %d bytes: %d socket writes, want at most %d", total, got, wantWrites)
	}
	// Writes of several sizes, each at most ceil(n/gatherMax) socket writes.
	for _, n := range []int{1, 100, 64 << 10, 300 << 10} {
		p := make([]byte, n)
		rng.Read(p)
		sent.Write(p)
		before := cc.writes.Load()
		if _, err := c.Write(p); err != nil {
			t.Fatal(err)
		}
		want := int64((n + gatherMax - 1) / gatherMax)
		if got := cc.writes.Load() - before; got != want {
			t.Errorf("Write of %d bytes: %d socket writes, want %d", n, got, want)
		}
		wantRecords += (n + maxRecordPlain - 1) / maxRecordPlain
	}
	c.Close()
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	if !bytes.Equal(res.data, sent.Bytes()) {
		t.Fatalf("server read %d bytes, %d sent, or other bytes", len(res.data), sent.Len())
	}
	// Besides the data records: the client's handshake records and its close_notify.
	if res.records > wantRecords+4 {
		t.Errorf("%d records for %d expected data records", res.records, wantRecords)
	}
}

// recordCounter counts the TLS records read through it (a record header is 5 bytes: type,
// version, length).
type recordCounter struct {
	net.Conn
	records int
	hdr     []byte
	body    int
}

func (r *recordCounter) Read(p []byte) (int, error) {
	n, err := r.Conn.Read(p)
	for b := p[:n]; len(b) > 0; {
		if r.body > 0 {
			k := min(r.body, len(b))
			r.body -= k
			b = b[k:]
			continue
		}
		k := min(5-len(r.hdr), len(b))
		r.hdr = append(r.hdr, b[:k]...)
		b = b[k:]
		if len(r.hdr) == 5 {
			r.records++
			r.body = int(r.hdr[3])<<8 | int(r.hdr[4])
			r.hdr = r.hdr[:0]
		}
	}
	return n, err
}
