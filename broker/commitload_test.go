package broker

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lightq/lightq/wire"
)

// The commit load of TestCommitFlood and BenchmarkCommitThroughput: raw connections that
// pipeline COMMIT_OFFSET, and a prober that commits one at a time and times each answer.

// commitPair is a (group, partition) to commit to.
type commitPair struct {
	group     string
	partition uint32
}

// floodPairs is groups x partitions pairs, group names made unique by prefix.
func floodPairs(prefix string, groups, partitions int) []commitPair {
	ps := make([]commitPair, 0, groups*partitions)
	for g := range groups {
		for p := range partitions {
			ps = append(ps, commitPair{prefix + strconv.Itoa(g), uint32(p)})
		}
	}
	return ps
}

// commitConn is one logged-in raw connection used off the test goroutine (no t.Fatal).
type commitConn struct {
	conn  net.Conn
	r     *bufio.Reader
	topic string
}

func dialCommitter(t testing.TB, addr, user, pass, topic string) *commitConn {
	t.Helper()
	c := login(t, addr, user, pass)
	return &commitConn{conn: c.conn, r: c.r, topic: topic}
}

// readAnswer reads one frame and returns its corr id and, for an ERROR, the error.
func (c *commitConn) readAnswer(buf []byte) (uint32, []byte, error) {
	_ = c.conn.SetReadDeadline(time.Now().Add(60 * time.Second))
	buf = slices.Grow(buf[:0], wire.HeaderSize)[:wire.HeaderSize]
	if _, err := io.ReadFull(c.r, buf); err != nil {
		return 0, buf, err
	}
	n, err := wire.FrameSize(buf, 1<<20)
	if err != nil {
		return 0, buf, err
	}
	buf = slices.Grow(buf, n)[:n]
	if _, err := io.ReadFull(c.r, buf[wire.HeaderSize:]); err != nil {
		return 0, buf, err
	}
	h, body, err := wire.ParseFrame(buf)
	if err != nil {
		return 0, buf, err
	}
	if h.Op == wire.OpError {
		var eb wire.ErrorBody
		_ = eb.Decode(body)
		return h.Corr, buf, &wire.Error{Code: eb.Code, Message: eb.Message}
	}
	if h.Op != wire.OpCommitOffset {
		return h.Corr, buf, fmt.Errorf("answer %s to a COMMIT_OFFSET", h.Op)
	}
	return h.Corr, buf, nil
}

func (c *commitConn) appendCommit(dst []byte, corr uint32, p commitPair) []byte {
	m := wire.CommitOffset{Group: p.group, Topic: c.topic, Partition: p.partition, Offset: 0}
	start := len(dst)
	dst = append(dst, make([]byte, wire.HeaderSize)...)
	dst = m.AppendTo(dst)
	wire.PutHeader(dst[start:], wire.OpCommitOffset, 0, corr, len(dst)-start-wire.HeaderSize)
	return dst
}

// flood commits to pairs round-robin, window requests in flight, until n are sent or stop
// is closed, and waits for the answers. It returns the number of successful answers and
// the first error (an ERROR answer, or a connection error, which ends the flood).
func (c *commitConn) flood(pairs []commitPair, window, n int, stop <-chan struct{}) (int, error) {
	acks := make(chan error, window+1)
	go func() {
		var buf []byte
		for {
			var err error
			_, buf, err = c.readAnswer(buf)
			acks <- err
			var we *wire.Error
			if err != nil && !errors.As(err, &we) {
				return
			}
		}
	}()
	inflight, answered, sent := 0, 0, 0
	var first error
	alive := true
	handle := func(err error) {
		inflight--
		var we *wire.Error
		switch {
		case err == nil:
			answered++
		case errors.As(err, &we):
			if first == nil {
				first = err
			}
		default:
			if first == nil {
				first = err
			}
			alive = false
		}
	}
	var wbuf []byte
	corr := uint32(0)
	for alive && first == nil && sent < n && !isClosed(stop) {
		for alive && inflight >= window {
			handle(<-acks)
		}
		if !alive {
			break
		}
		batch := min(window-inflight, 64, n-sent)
		wbuf = wbuf[:0]
		for range batch {
			corr++
			wbuf = c.appendCommit(wbuf, corr, pairs[int(corr)%len(pairs)])
		}
		_ = c.conn.SetWriteDeadline(time.Now().Add(60 * time.Second))
		if _, err := c.conn.Write(wbuf); err != nil {
			return answered, err
		}
		inflight += batch
		sent += batch
	drain:
		for {
			select {
			case err := <-acks:
				handle(err)
			default:
				break drain
			}
		}
	}
	for alive && inflight > 0 {
		handle(<-acks)
	}
	if alive {
		_ = c.conn.SetReadDeadline(time.Now()) // stops the reader
	}
	return answered, first
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// probe commits one at a time until stop closes or max commits are done, and returns the
// latency of each.
func (c *commitConn) probe(p commitPair, max int, stop <-chan struct{}) ([]time.Duration, error) {
	var lat []time.Duration
	var wbuf, rbuf []byte
	for corr := uint32(1); len(lat) < max && !isClosed(stop); corr++ {
		wbuf = c.appendCommit(wbuf[:0], corr, p)
		start := time.Now()
		_ = c.conn.SetWriteDeadline(start.Add(60 * time.Second))
		if _, err := c.conn.Write(wbuf); err != nil {
			return lat, err
		}
		var err error
		var got uint32
		got, rbuf, err = c.readAnswer(rbuf)
		if err != nil {
			return lat, err
		}
		if got != corr {
			return lat, fmt.Errorf("answer to %d, want %d", got, corr)
		}
		lat = append(lat, time.Since(start))
	}
	return lat, nil
}

func p99(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)*99+99)/100-1]
}

// selfRSS is this process's resident set size (VmRSS in /proc/self/status), in bytes.
func selfRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}
