package chaos

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

// RawConn speaks the protocol to one broker, one request at a time, with no reconnect,
// routing or retry of its own: what the harness needs to ask a given broker for the cluster
// layout (METADATA with the cluster flag, which the Go client does not expose) and to time a
// failover to the produce that a given new leader accepts, without the client's backoff in
// the figure. Not safe for concurrent use.
type RawConn struct {
	nc   net.Conn
	br   *bufio.Reader
	corr uint32
	addr string
	wbuf []byte
	bb   wire.BatchBuilder
}

// DialRaw connects to addr and logs in (HELLO, AUTH) within ctx.
func DialRaw(ctx context.Context, addr, user, password string) (*RawConn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &RawConn{nc: nc, br: bufio.NewReaderSize(nc, 64<<10), addr: addr}
	hello := wire.Hello{ClientName: "chaos", ClientVersion: "0"}
	body, err := c.Request(ctx, wire.OpHello, hello.AppendTo(nil))
	if err == nil {
		var hr wire.HelloResponse
		err = hr.Decode(body)
	}
	if err == nil {
		auth := wire.Auth{User: user, Password: password}
		_, err = c.Request(ctx, wire.OpAuth, auth.AppendTo(nil))
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("%s: %w", addr, err)
	}
	return c, nil
}

// Addr is the address dialed.
func (c *RawConn) Addr() string { return c.addr }

// Close closes the connection.
func (c *RawConn) Close() error { return c.nc.Close() }

// Request sends one request and returns the body of its answer, or the broker's refusal as a
// *wire.Error. The connection is unusable after any other error (close it).
func (c *RawConn) Request(ctx context.Context, op wire.Op, body []byte) ([]byte, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(30 * time.Second)
	}
	_ = c.nc.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	c.corr++
	c.wbuf = wire.AppendFrame(c.wbuf[:0], op, 0, c.corr, body)
	if _, err := c.nc.Write(c.wbuf); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	for {
		h, resp, err := ReadFrame(c.br, MaxAnswer)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if ok && !time.Now().Before(deadline) { // the socket's deadline fired before ctx's timer
				return nil, fmt.Errorf("%w: %v", context.DeadlineExceeded, err)
			}
			return nil, err
		}
		if h.Corr != c.corr || h.Flags&wire.FlagResponse == 0 && h.Op != wire.OpError {
			continue // not the answer: a push frame, or an ERROR for no request
		}
		if h.Op == wire.OpError {
			var eb wire.ErrorBody
			if err := eb.Decode(resp); err != nil {
				return nil, fmt.Errorf("ERROR frame: %w", err)
			}
			return nil, &wire.Error{Code: eb.Code, Message: eb.Message}
		}
		if h.Op != op {
			return nil, fmt.Errorf("answer to %v has op %v", op, h.Op)
		}
		return resp, nil
	}
}

// MaxAnswer bounds a frame RawConn reads: the answers it asks for are small.
const MaxAnswer = 16 << 20

// ReadFrame reads one whole frame from r (at most limit bytes) and returns its header and
// body; the body is freshly allocated.
func ReadFrame(r io.Reader, limit int) (wire.Header, []byte, error) {
	var hdr [wire.HeaderSize]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return wire.Header{}, nil, err
	}
	size, err := wire.FrameSize(hdr[:], limit)
	if err != nil {
		return wire.Header{}, nil, err
	}
	h, _ := wire.PeekHeader(hdr[:])
	body := make([]byte, size-wire.HeaderSize)
	if _, err := io.ReadFull(r, body); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return wire.Header{}, nil, err
	}
	return h, body, nil
}

// ClusterMetadata asks METADATA with the cluster flag: each partition's leader and replicas,
// and the brokers' addresses.
func (c *RawConn) ClusterMetadata(ctx context.Context, topics ...string) (*wire.MetadataResponse, error) {
	req := wire.MetadataRequest{Topics: topics, Cluster: true}
	body, err := c.Request(ctx, wire.OpMetadata, req.AppendTo(nil))
	if err != nil {
		return nil, err
	}
	resp := &wire.MetadataResponse{Cluster: true}
	if err := resp.Decode(body); err != nil {
		return nil, fmt.Errorf("METADATA answer: %w", err)
	}
	return resp, nil
}

// Produce sends one record with value to a partition, as a batch without a producer id, and
// returns its offset.
func (c *RawConn) Produce(ctx context.Context, topic string, partition int32, acks wire.Acks, value []byte) (int64, error) {
	c.bb.Reset()
	c.bb.Append(time.Now().UnixMilli(), nil, value, nil)
	batch, err := c.bb.Finish(wire.CodecNone, nil)
	if err != nil {
		return 0, err
	}
	body := wire.AppendProduceHeader(nil, topic, partition, acks)
	body = append(body, batch...)
	resp, err := c.Request(ctx, wire.OpProduce, body)
	if err != nil {
		return 0, err
	}
	var pr wire.ProduceResponse
	if err := pr.Decode(resp); err != nil {
		return 0, fmt.Errorf("PRODUCE answer: %w", err)
	}
	return pr.BaseOffset, nil
}

// Leaders maps each partition of topic in a cluster METADATA answer to its leader's node id
// (0: none known, an election is under way); nil when the answer does not name the topic.
func Leaders(md *wire.MetadataResponse, topic string) map[int32]uint32 {
	for _, t := range md.Topics {
		if t.Name != topic {
			continue
		}
		out := map[int32]uint32{}
		for _, p := range t.Partitions {
			out[int32(p.ID)] = p.Leader
		}
		return out
	}
	return nil
}

// HighWatermark asks LIST_OFFSETS (latest) for a partition's high watermark.
func (c *RawConn) HighWatermark(ctx context.Context, topic string, partition int32) (int64, error) {
	req := wire.ListOffsets{Topic: topic, Partition: uint32(partition), Mode: wire.OffsetLatest}
	resp, err := c.Request(ctx, wire.OpListOffsets, req.AppendTo(nil))
	if err != nil {
		return 0, err
	}
	r := wire.NewReader(resp)
	off := r.I64()
	if err := r.Done("LIST_OFFSETS answer"); err != nil {
		return 0, err
	}
	return off, nil
}
