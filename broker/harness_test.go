package broker

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/lightq/lightq/broker/auth"
	"github.com/lightq/lightq/wire"
)

const (
	testAdminUser = "admin"
	testAdminPass = "admin-secret-pw"
)

// testConfig is a broker configuration for tests: loopback, a free port, a temp data dir and
// cheap password hashing.
func testConfig(t testing.TB) Config {
	cfg := DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	cfg.DataDir = t.TempDir()
	cfg.AdminUser = testAdminUser
	cfg.AdminPassword = testAdminPass
	cfg.HashParams = auth.TestParams()
	cfg.RingBytes = 4 << 20
	cfg.ShutdownDrain = 500 * time.Millisecond
	if testing.Verbose() {
		cfg.Logger = zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.DebugLevel)
	}
	return cfg
}

// startBroker starts a broker for the test and stops it at the end.
func startBroker(t testing.TB, mutate func(*Config)) *Server {
	t.Helper()
	cfg := testConfig(t)
	if mutate != nil {
		mutate(&cfg)
	}
	return startWith(t, cfg)
}

func startWith(t testing.TB, cfg Config) *Server {
	t.Helper()
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return srv
}

// waitUntil polls cond until it holds, failing the test after a deadline that only a broken
// broker misses, even on a loaded machine. Use it to wait for something the broker does
// where no frame tells the client.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still not %s after 20 s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// openConns is how many connections s has open (registered in OnOpen, removed in OnClose).
func openConns(s *Server) int {
	s.connsMu.Lock()
	defer s.connsMu.Unlock()
	return len(s.conns)
}

// rawClient speaks the protocol byte by byte, so tests see exactly what the broker sends.
type rawClient struct {
	t    testing.TB
	conn net.Conn
	r    *bufio.Reader
	corr uint32
}

func dialRaw(t testing.TB, addr string) *rawClient {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawClient{t: t, conn: c, r: bufio.NewReaderSize(c, 1<<20)}
}

func (c *rawClient) nextCorr() uint32 {
	c.corr++
	return c.corr
}

func (c *rawClient) write(b []byte) {
	c.t.Helper()
	_ = c.conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.conn.Write(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// send writes one request frame and returns its correlation id.
func (c *rawClient) send(op wire.Op, body []byte) uint32 {
	c.t.Helper()
	corr := c.nextCorr()
	c.write(wire.AppendFrame(nil, op, 0, corr, body))
	return corr
}

type frame struct {
	h    wire.Header
	body []byte
}

// readFrame reads one frame or fails the test; io errors are returned for close checks.
func (c *rawClient) readFrame(timeout time.Duration) (frame, error) {
	_ = c.conn.SetReadDeadline(time.Now().Add(timeout))
	head := make([]byte, wire.HeaderSize)
	if _, err := io.ReadFull(c.r, head); err != nil {
		return frame{}, err
	}
	n, err := wire.FrameSize(head, 64<<20)
	if err != nil {
		c.t.Fatalf("broker sent a bad header % x: %v", head, err)
	}
	buf := make([]byte, n)
	copy(buf, head)
	if _, err := io.ReadFull(c.r, buf[wire.HeaderSize:]); err != nil {
		return frame{}, err
	}
	h, body, err := wire.ParseFrame(buf)
	if err != nil {
		c.t.Fatal(err)
	}
	return frame{h, body}, nil
}

func (c *rawClient) mustRead() frame {
	c.t.Helper()
	f, err := c.readFrame(10 * time.Second)
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	return f
}

// expectResponse reads the next frame and checks it answers corr with op.
func (c *rawClient) expectResponse(op wire.Op, corr uint32) []byte {
	c.t.Helper()
	f := c.mustRead()
	if f.h.Op == wire.OpError {
		var eb wire.ErrorBody
		_ = eb.Decode(f.body)
		c.t.Fatalf("%s (corr %d): got ERROR %s: %s", op, corr, eb.Code, eb.Message)
	}
	if f.h.Op != op || f.h.Corr != corr || f.h.Flags&wire.FlagResponse == 0 {
		c.t.Fatalf("want %s response to %d, got %s corr %d flags %x", op, corr, f.h.Op, f.h.Corr, f.h.Flags)
	}
	return f.body
}

// expectError reads the next frame and checks it is an ERROR with code for corr.
func (c *rawClient) expectError(corr uint32, code wire.Code) wire.ErrorBody {
	c.t.Helper()
	f := c.mustRead()
	if f.h.Op != wire.OpError {
		c.t.Fatalf("want ERROR %s for corr %d, got %s corr %d", code, corr, f.h.Op, f.h.Corr)
	}
	var eb wire.ErrorBody
	if err := eb.Decode(f.body); err != nil {
		c.t.Fatal(err)
	}
	if eb.Code != code || f.h.Corr != corr {
		c.t.Fatalf("want ERROR %s for corr %d, got %s for corr %d: %s", code, corr, eb.Code, f.h.Corr, eb.Message)
	}
	return eb
}

// expectClosed checks the broker closes the connection (after any frames it still sends).
func (c *rawClient) expectClosed() {
	c.t.Helper()
	for i := 0; i < 100; i++ {
		_, err := c.readFrame(5 * time.Second)
		if err == nil {
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			c.t.Fatal("connection still open")
		}
		return
	}
	c.t.Fatal("connection still open after 100 frames")
}

func (c *rawClient) hello() wire.HelloResponse {
	c.t.Helper()
	m := wire.Hello{ClientName: "rawtest", ClientVersion: "1"}
	corr := c.send(wire.OpHello, m.AppendTo(nil))
	var resp wire.HelloResponse
	if err := resp.Decode(c.expectResponse(wire.OpHello, corr)); err != nil {
		c.t.Fatal(err)
	}
	return resp
}

func (c *rawClient) auth(user, pass string) {
	c.t.Helper()
	m := wire.Auth{User: user, Password: pass}
	corr := c.send(wire.OpAuth, m.AppendTo(nil))
	c.expectResponse(wire.OpAuth, corr)
}

// login dials, says HELLO and authenticates.
func login(t testing.TB, addr, user, pass string) *rawClient {
	t.Helper()
	c := dialRaw(t, addr)
	c.hello()
	c.auth(user, pass)
	return c
}

func (c *rawClient) createTopic(name string, partitions uint32, user, pass string) {
	c.t.Helper()
	m := wire.CreateTopic{Name: name, Kind: wire.KindTransient, Partitions: partitions, User: user, Password: pass}
	corr := c.send(wire.OpCreateTopic, m.AppendTo(nil))
	c.expectResponse(wire.OpCreateTopic, corr)
}

func (c *rawClient) ping() {
	c.t.Helper()
	corr := c.send(wire.OpPing, nil)
	c.expectResponse(wire.OpPing, corr)
}

// testBatch builds a batch of values.
func testBatch(t testing.TB, values ...string) []byte {
	var b wire.BatchBuilder
	for _, v := range values {
		b.Append(time.Now().UnixMilli(), nil, []byte(v), nil)
	}
	out, err := b.Finish(wire.CodecNone, nil)
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte(nil), out...)
}

func produceBody(topic string, partition int32, acks wire.Acks, batch []byte) []byte {
	m := wire.Produce{Topic: []byte(topic), Partition: partition, Acks: acks, Batch: batch}
	return m.AppendTo(nil)
}

func (c *rawClient) produce(topic string, partition int32, batch []byte) wire.ProduceResponse {
	c.t.Helper()
	corr := c.send(wire.OpProduce, produceBody(topic, partition, wire.AcksWritten, batch))
	var resp wire.ProduceResponse
	if err := resp.Decode(c.expectResponse(wire.OpProduce, corr)); err != nil {
		c.t.Fatal(err)
	}
	return resp
}

func (c *rawClient) subscribe(topic string, partition int32, group string, credit uint32) uint32 {
	c.t.Helper()
	m := wire.Subscribe{Topic: topic, Partition: partition, QueueGroup: group, Credit: credit}
	corr := c.send(wire.OpSubscribe, m.AppendTo(nil))
	var resp wire.SubscribeResponse
	if err := resp.Decode(c.expectResponse(wire.OpSubscribe, corr)); err != nil {
		c.t.Fatal(err)
	}
	return resp.SubscriptionID
}

// delivered is one DELIVER frame, decoded.
type delivered struct {
	sub       uint32
	partition uint32
	dropped   uint64
	batch     wire.Batch
	values    []string
}

func (c *rawClient) readDeliver() delivered {
	c.t.Helper()
	f := c.mustRead()
	if f.h.Op != wire.OpDeliver {
		var eb wire.ErrorBody
		_ = eb.Decode(f.body)
		c.t.Fatalf("want DELIVER, got %s corr %d (%s %s)", f.h.Op, f.h.Corr, eb.Code, eb.Message)
	}
	var d wire.Deliver
	if err := d.Decode(f.body); err != nil {
		c.t.Fatal(err)
	}
	bt, err := wire.ParseBatch(d.Batch, 64<<20)
	if err != nil {
		c.t.Fatalf("delivered batch corrupt: %v", err)
	}
	out := delivered{sub: f.h.Corr, partition: d.Partition, dropped: d.Dropped, batch: bt}
	it := wire.NewRecordIter(bt.Records, bt.RecordCount, bt.BaseOffset, bt.FirstTimestamp)
	var rec wire.Record
	for it.Next(&rec) {
		out.values = append(out.values, string(rec.Value))
	}
	if err := it.Err(); err != nil {
		c.t.Fatal(err)
	}
	return out
}
