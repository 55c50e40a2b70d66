package compare

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/lightq/lightq/wire"
)

// A LightQ cluster's partition leader, asked for with METADATA's cluster flag (PROTOCOL.md
// section 16) over a connection of our own: the Go client does not ask for the cluster
// layout, and lqbench goes to the one broker it is given, so the replicated cases point it at
// the leader they find here.

// rawConn is a plain LightQ protocol connection: one request at a time. Not safe for
// concurrent use.
type rawConn struct {
	c    net.Conn
	r    *bufio.Reader
	corr uint32
}

// maxMetaFrame bounds a response frame read here.
const maxMetaFrame = 4 << 20

// dialRaw connects to addr, says HELLO and logs in as user; every step is bounded by ctx and
// by the deadline of 10 s.
func dialRaw(ctx context.Context, addr, user, pass string) (*rawConn, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	c := &rawConn{c: nc, r: bufio.NewReader(nc)}
	hello := wire.Hello{ClientName: "compare", ClientVersion: "1"}
	auth := wire.Auth{User: user, Password: pass}
	if _, err := c.call(wire.OpHello, hello.AppendTo(nil)); err != nil {
		nc.Close()
		return nil, fmt.Errorf("%s: HELLO: %w", addr, err)
	}
	if _, err := c.call(wire.OpAuth, auth.AppendTo(nil)); err != nil {
		nc.Close()
		return nil, fmt.Errorf("%s: AUTH: %w", addr, err)
	}
	_ = nc.SetDeadline(time.Time{})
	return c, nil
}

func (c *rawConn) Close() error { return c.c.Close() }

// call sends one request and returns the body of its response: a *wire.Error when the broker
// answers ERROR. Frames for other correlation ids are skipped.
func (c *rawConn) call(op wire.Op, body []byte) ([]byte, error) {
	c.corr++
	if _, err := c.c.Write(wire.AppendFrame(nil, op, 0, c.corr, body)); err != nil {
		return nil, err
	}
	for {
		head, err := c.r.Peek(wire.HeaderSize)
		if err != nil {
			return nil, err
		}
		n, err := wire.FrameSize(head, maxMetaFrame)
		if err != nil {
			return nil, err
		}
		frame := make([]byte, n)
		if _, err := io.ReadFull(c.r, frame); err != nil {
			return nil, err
		}
		h, resp, err := wire.ParseFrame(frame)
		if err != nil {
			return nil, err
		}
		if h.Corr != c.corr {
			continue
		}
		if h.Op == wire.OpError {
			var eb wire.ErrorBody
			if err := eb.Decode(resp); err != nil {
				return nil, fmt.Errorf("%s: ERROR body: %w", op, err)
			}
			return nil, &wire.Error{Code: eb.Code, Message: eb.Message}
		}
		if h.Op != op || h.Flags&wire.FlagResponse == 0 {
			return nil, fmt.Errorf("want a %s response, got %s (flags %#x)", op, h.Op, h.Flags)
		}
		return resp, nil
	}
}

// clusterMetadata asks for topic's cluster layout: its partitions' leaders and replicas, the
// answering broker's node id and every broker's address.
func (c *rawConn) clusterMetadata(topic string) (wire.MetadataResponse, error) {
	_ = c.c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.c.SetDeadline(time.Time{})
	req := wire.MetadataRequest{Topics: []string{topic}, Cluster: true}
	body, err := c.call(wire.OpMetadata, req.AppendTo(nil))
	if err != nil {
		return wire.MetadataResponse{}, err
	}
	resp := wire.MetadataResponse{Cluster: true}
	if err := resp.Decode(body); err != nil {
		return wire.MetadataResponse{}, fmt.Errorf("METADATA response: %w", err)
	}
	return resp, nil
}

// leaderOf reads partition 0's leader of topic from a cluster METADATA response: its node id
// and client address; 0 while there is none (an election is under way).
func leaderOf(md wire.MetadataResponse, topic string) (uint32, string, error) {
	for _, t := range md.Topics {
		if t.Name != topic {
			continue
		}
		if len(t.Partitions) == 0 {
			return 0, "", fmt.Errorf("topic %s has no partitions", topic)
		}
		id := t.Partitions[0].Leader
		if id == 0 {
			return 0, "", nil
		}
		for _, b := range md.Brokers {
			if b.NodeID == id {
				return id, b.Addr, nil
			}
		}
		return 0, "", fmt.Errorf("leader node %d of %s is not in the broker list %v", id, topic, md.Brokers)
	}
	return 0, "", nil // not known to this broker yet
}

// waitLeader polls the cluster members (client addresses, node id i+1 at addrs[i]) until one
// names partition 0's leader of topic and the leader, asked itself, agrees: it returns the
// leader's index in addrs.
func waitLeader(ctx context.Context, addrs []string, user, pass, topic string, timeout time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conns := make([]*rawConn, len(addrs))
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	var last error
	for {
		for i, addr := range addrs {
			if conns[i] == nil {
				c, err := dialRaw(ctx, addr, user, pass)
				if err != nil {
					last = err
					continue
				}
				conns[i] = c
			}
			md, err := conns[i].clusterMetadata(topic)
			if err != nil {
				last = fmt.Errorf("%s: %w", addr, err)
				conns[i].Close()
				conns[i] = nil
				continue
			}
			id, _, err := leaderOf(md, topic)
			if err != nil {
				return -1, err
			}
			// The leader's own answer: it names itself.
			if id != 0 && md.NodeID == id && int(id) == i+1 {
				return i, nil
			}
		}
		select {
		case <-ctx.Done():
			if last == nil {
				last = errors.New("no broker named itself the leader")
			}
			return -1, fmt.Errorf("topic %s: no leader after %v: %w", topic, timeout, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
