package broker

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/lightq/lightq/broker/ring"
	"github.com/lightq/lightq/wire"
)

// TestRingSlotsCountAgainstRingMemory: CREATE_TOPIC counts each partition's slot index, not
// only its arena, against MaxRingMemory, refuses a topic past the cap with RESOURCE_LIMIT
// naming the numbers, and gets the memory back when a topic is deleted.
func TestRingSlotsCountAgainstRingMemory(t *testing.T) {
	const arena = 4 << 20
	perPartition := ring.Memory(arena, 1024)
	maxMemory := 4*perPartition - 1 // three default partitions fit, four do not
	srv := startBroker(t, func(c *Config) { c.RingBytes, c.RingSlots, c.MaxRingMemory = arena, 1024, maxMemory })
	admin := login(t, srv.Addr(), testAdminUser, testAdminPass)

	create := func(name string, partitions uint32, opts ...wire.Option) uint32 {
		m := wire.CreateTopic{Name: name, Kind: wire.KindTransient, Partitions: partitions, User: "u", Password: "pw", Options: opts}
		return admin.send(wire.OpCreateTopic, m.AppendTo(nil))
	}
	// A small arena with a million slots: 2 MiB of arena, 72 MiB of slot index (on 64-bit).
	// Counting only the arena let this through.
	corr := create("many-slots", 1, wire.Option{Key: wire.OptionRingBytes, Value: fmt.Sprint(2 << 20)}, wire.Option{Key: wire.OptionRingSlots, Value: fmt.Sprint(1 << 20)})
	eb := admin.expectError(corr, wire.CodeResourceLimit)
	need := ring.Memory(2<<20, 1<<20)
	for _, want := range []string{fmt.Sprint(need), fmt.Sprintf("%d slots x %d bytes", 1<<20, ring.SlotBytes), fmt.Sprint(maxMemory)} {
		if !strings.Contains(eb.Message, want) {
			t.Errorf("refusal %q does not name %q", eb.Message, want)
		}
	}

	admin.expectResponse(wire.OpCreateTopic, create("three", 3))
	eb = admin.expectError(create("one-more", 1), wire.CodeResourceLimit)
	if want := fmt.Sprintf("%d of the broker's %d are in use", 3*perPartition, maxMemory); !strings.Contains(eb.Message, want) {
		t.Errorf("refusal %q does not say %q", eb.Message, want)
	}
	corr = admin.send(wire.OpDeleteTopic, (&wire.TopicName{Name: "three"}).AppendTo(nil))
	admin.expectResponse(wire.OpDeleteTopic, corr)
	admin.expectResponse(wire.OpCreateTopic, create("one-more", 1))
}

// expectTimeout reads the ERROR TIMEOUT (corr id 0) that closes c, waiting up to wait, checks
// its message names what, and that the connection then closes.
func (c *rawClient) expectTimeout(wait time.Duration, what string) {
	c.t.Helper()
	h, eb := c.errorFrame(wait)
	if eb.Code != wire.CodeTimeout || h.Corr != 0 || !strings.Contains(eb.Message, what) {
		c.t.Fatalf("want ERROR TIMEOUT for corr 0 naming %q, got %s for corr %d: %s", what, eb.Code, h.Corr, eb.Message)
	}
	c.expectClosed()
}

// TestSlowFrameIsClosed: a client that sends part of a frame after AUTH and stalls is answered
// TIMEOUT, saying how much arrived, and closed after the read timeout, not before.
func TestSlowFrameIsClosed(t *testing.T) {
	const readTimeout = 300 * time.Millisecond
	srv := startBroker(t, func(c *Config) { c.ReadTimeout = readTimeout })
	for _, tc := range []struct {
		name string
		sent int // bytes of the frame sent
		what string
	}{
		{"half a header", 9, "9 bytes of its header arrived"},
		{"header and part of the body", 20, "20 of its 40 bytes arrived"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := login(t, srv.Addr(), testAdminUser, testAdminPass)
			frame := wire.AppendFrame(nil, wire.OpMetadata, 0, c.nextCorr(), make([]byte, 24))
			start := time.Now()
			c.write(frame[:tc.sent])
			c.expectTimeout(20*time.Second, tc.what)
			if waited := time.Since(start); waited < readTimeout {
				t.Errorf("closed after %v, before the read timeout (%v)", waited, readTimeout)
			}
		})
	}
}

// TestIdleTimeout: an authenticated connection with nothing outstanding is closed with TIMEOUT
// after the idle timeout; one that sends PINGs, one with a subscription and one with a FETCH
// waiting for data stay open.
func TestIdleTimeout(t *testing.T) {
	const idleTimeout = time.Second // long enough that a loaded machine does not stall the pinger past it
	srv := startBroker(t, func(c *Config) { c.IdleTimeout = idleTimeout })
	admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
	admin.createTopic("live", 1, "live-user", "live-pw")
	admin.createDurable("stored", 1)

	pinger := login(t, srv.Addr(), testAdminUser, testAdminPass)
	subscriber := login(t, srv.Addr(), "live-user", "live-pw")
	subscriber.subscribe("live", 0, "", 1<<20)
	fetcher := login(t, srv.Addr(), "d-user", "d-pw")
	fetchCorr := fetcher.sendFetch("stored", 0, 0, 60_000) // waits for data much longer than this test

	// Two connections idle out one after the other, the second logging in once the first has
	// gone, so that by then the others have spent two idle timeouts without a request; the
	// pinger pings while waiting.
	for round := 0; round < 2; round++ {
		idler := login(t, srv.Addr(), testAdminUser, testAdminPass)
		start := time.Now()
		deadline := start.Add(20 * time.Second)
		for {
			f, err := idler.readFrame(25 * time.Millisecond)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && time.Now().Before(deadline) {
				pinger.ping()
				continue
			}
			if err != nil {
				t.Fatalf("round %d: idle connection: %v, want ERROR TIMEOUT", round, err)
			}
			var eb wire.ErrorBody
			_ = eb.Decode(f.body)
			if f.h.Op != wire.OpError || eb.Code != wire.CodeTimeout || f.h.Corr != 0 || !strings.Contains(eb.Message, "idle for 1s") {
				t.Fatalf("round %d: idle connection got %s corr %d %s %q, want ERROR TIMEOUT (corr 0) naming the idle timeout", round, f.h.Op, f.h.Corr, eb.Code, eb.Message)
			}
			break
		}
		idler.expectClosed()
		if waited := time.Since(start); waited < idleTimeout {
			t.Fatalf("round %d: idle connection closed after %v, before the idle timeout", round, waited)
		}
	}
	pinger.ping()
	subscriber.ping()
	fetcher.ping()
	pinger.produceAcks("stored", 0, wire.AcksWritten, testBatch(t, "wake")) // admin itself has idled out
	if _, values := fetcher.fetchedValues(fetchCorr, 0); len(values) != 1 {
		t.Fatalf("the waiting FETCH got %q", values)
	}
}

// dialFrom connects to addr from the local IP from: on Linux every 127.x.y.z is loopback, so
// tests can play several client addresses.
func dialFrom(t *testing.T, from, addr string) *rawClient {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawClient{t: t, conn: c, r: bufio.NewReaderSize(c, 1<<20)}
}

// expectRefused checks that c is answered TOO_MANY_CONNECTIONS (corr id 0) naming what, then
// closed.
func (c *rawClient) expectRefused(what string) {
	c.t.Helper()
	h, eb := c.errorFrame(10 * time.Second)
	if eb.Code != wire.CodeTooManyConnections || h.Corr != 0 || !strings.Contains(eb.Message, what) {
		c.t.Fatalf("want ERROR TOO_MANY_CONNECTIONS for corr 0 naming %q, got %s for corr %d: %s", what, eb.Code, h.Corr, eb.Message)
	}
	c.expectClosed()
}

// TestConnectionCaps: past the cap per client address, and past the broker's cap, a new
// connection is answered TOO_MANY_CONNECTIONS and closed; closing a connection makes room.
func TestConnectionCaps(t *testing.T) {
	srv := startBroker(t, func(c *Config) { c.MaxConnections, c.MaxConnectionsPerAddr = 4, 2 })
	addr := srv.Addr()
	first := dialFrom(t, "127.0.0.1", addr)
	first.hello()
	dialFrom(t, "127.0.0.1", addr).hello()
	dialFrom(t, "127.0.0.1", addr).expectRefused("the connection limit per client address (2 open from 127.0.0.1) is reached")

	dialFrom(t, "127.0.0.2", addr).hello() // another address has its own count
	dialFrom(t, "127.0.0.2", addr).hello()
	eager := dialFrom(t, "127.0.0.3", addr) // a client that does not wait for the refusal
	eager.send(wire.OpHello, (&wire.Hello{ClientName: "eager", ClientVersion: "1"}).AppendTo(nil))
	eager.expectRefused("the broker's connection limit (4 open) is reached")

	first.conn.Close()
	waitUntil(t, "the closed connection is forgotten", func() bool { return openConns(srv) == 3 })
	dialFrom(t, "127.0.0.1", addr).hello()
	dialFrom(t, "127.0.0.3", addr).expectRefused("the broker's connection limit (4 open)")
}

// TestRefusalLogIsRateLimited: a flood of refused connections logs one line per
// refusalLogInterval, and that line counts the refusals not logged since the last.
func TestRefusalLogIsRateLimited(t *testing.T) {
	var buf bytes.Buffer
	s := &Server{cfg: DefaultConfig()}
	log := zerolog.New(&buf)
	for i := 0; i < 100; i++ {
		s.logRefusal(log, "the broker's connection limit (10000 open) is reached")
	}
	if n := strings.Count(buf.String(), "\n"); n != 1 {
		t.Fatalf("100 refusals logged %d lines, want 1:\n%s", n, buf.String())
	}
	s.refusalLogNext.Store(time.Now().UnixNano()) // as if the interval had passed
	s.logRefusal(log, "the broker's connection limit (10000 open) is reached")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], `"refused_unlogged":99`) || !strings.Contains(lines[1], "limit (10000 open)") {
		t.Fatalf("the next line after the interval: %q, want 99 refusals counted and the reason", lines[len(lines)-1])
	}
}

// TestRepeatedTopicOptionIsRefused: a CREATE_TOPIC that repeats an option key is
// INVALID_REQUEST, so a topic keeps at most one value per known option.
func TestRepeatedTopicOptionIsRefused(t *testing.T) {
	srv := startBroker(t, nil)
	admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
	padded := strings.Repeat("0", wire.MaxOptionValue-7) + "4194304" // a valid ring.bytes, as long as a value may be
	opts := make([]wire.Option, wire.MaxOptions)
	for i := range opts {
		opts[i] = wire.Option{Key: wire.OptionRingBytes, Value: padded}
	}
	m := wire.CreateTopic{Name: "repeats", Kind: wire.KindTransient, Partitions: 1, User: "u", Password: "pw", Options: opts}
	eb := admin.expectError(admin.send(wire.OpCreateTopic, m.AppendTo(nil)), wire.CodeInvalidRequest)
	if !strings.Contains(eb.Message, `"ring.bytes" is given more than once`) {
		t.Errorf("refusal %q does not name the repeated option", eb.Message)
	}
	m.Options = opts[:1]
	admin.expectResponse(wire.OpCreateTopic, admin.send(wire.OpCreateTopic, m.AppendTo(nil)))
}

// TestConnectionsWithinFDLimit: the connection cap leaves a quarter of the open-file limit for
// files, since running out of descriptors in accept stops gnet's engine.
func TestConnectionsWithinFDLimit(t *testing.T) {
	for _, tc := range []struct {
		fdLimit   uint64
		want, got int
	}{
		{20000, 10000, 10000},
		{1 << 20, 10000, 10000},
		{4096, 10000, 3072},
		{1024, 10000, 768},
		{1, 10000, 1},
		{1 << 62, 1 << 30, 1 << 30},
	} {
		if got := connectionsWithin(tc.fdLimit, tc.want); got != tc.got {
			t.Errorf("connectionsWithin(%d, %d) = %d, want %d", tc.fdLimit, tc.want, got, tc.got)
		}
	}
}
