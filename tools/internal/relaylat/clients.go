package relaylat

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/lightq/lightq/internal/pace"
)

// measure starts the relay process, connects the producer and the consumer through it, runs
// them to completion and returns the figures.
func measure(ctx context.Context, cfg config, timeout time.Duration, stderr io.Writer) (*result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, self, "-relay", "-timeout", timeout.String())
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	waited := false
	defer func() {
		if !waited {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	relayOut := bufio.NewReader(out)
	addr, err := relayOut.ReadString('\n') // EOF if the relay dies; ctx kills it
	if err != nil {
		return nil, fmt.Errorf("relay address: %w", err)
	}
	prod, err := connect(ctx, strings.TrimSpace(addr), roleProducer)
	if err != nil {
		return nil, fmt.Errorf("producer: %w", err)
	}
	defer prod.Close()
	cons, err := connect(ctx, strings.TrimSpace(addr), roleConsumer)
	if err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	defer cons.Close()
	go func() { <-ctx.Done(); prod.Close(); cons.Close() }()
	var ready [1]byte
	if _, err := io.ReadFull(cons, ready[:]); err != nil || ready[0] != relayReady {
		return nil, fmt.Errorf("relay not ready: %q %v", ready[0], err)
	}

	sends := make([]atomic.Int64, cfg.count) // unix ns of each message's write; 0 until written
	type produced struct {
		start time.Time
		err   error
	}
	pc := make(chan produced, 1)
	go func() {
		start, err := produce(prod, cfg, sends)
		if err != nil {
			cancel() // unblocks the consumer
		}
		pc <- produced{start, err}
	}()
	cs, cerr := consume(cons, cfg.size, cfg.count, sends)
	if cerr != nil {
		cancel() // unblocks the producer
	}
	p := <-pc
	var st relayStats
	line, rerr := relayOut.ReadString('\n')
	if rerr == nil {
		rerr = json.Unmarshal([]byte(line), &st)
	}
	waited = true
	werr := cmd.Wait()
	if err := errors.Join(p.err, cerr); err != nil {
		if werr != nil {
			err = errors.Join(err, fmt.Errorf("relay: %w", werr))
		}
		return nil, err
	}
	if werr != nil {
		return nil, fmt.Errorf("relay: %w", werr)
	}
	if rerr != nil {
		return nil, fmt.Errorf("relay stats: %w", rerr)
	}
	if want := int64(cfg.count) * int64(cfg.size); st.Bytes != want {
		return nil, fmt.Errorf("relay copied %d bytes, want %d", st.Bytes, want)
	}

	r := &result{Messages: cs.received, Size: cfg.size, Rate: cfg.rate, RelayReads: st.Reads,
		CPUSeconds: selfCPUSeconds(), RelayCPUSeconds: (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()}
	r.Seconds = cs.last.Sub(p.start).Seconds()
	if r.Seconds > 0 {
		r.MsgsPerSec = float64(r.Messages) / r.Seconds
	}
	h, sh := cs.hist, cs.sendHist
	r.P50Us, r.P90Us, r.P99Us = float64(h.ValueAtQuantile(50)), float64(h.ValueAtQuantile(90)), float64(h.ValueAtQuantile(99))
	r.P999Us, r.MaxUs = float64(h.ValueAtQuantile(99.9)), float64(h.Max())
	r.SendP50Us, r.SendP99Us = float64(sh.ValueAtQuantile(50)), float64(sh.ValueAtQuantile(99))
	r.SendP999Us, r.SendMaxUs = float64(sh.ValueAtQuantile(99.9)), float64(sh.Max())
	return r, nil
}

// connect dials the relay and names the connection's role.
func connect(ctx context.Context, addr string, role byte) (*net.TCPConn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if _, err := c.Write([]byte{role}); err != nil {
		c.Close()
		return nil, err
	}
	return c.(*net.TCPConn), nil
}

// produce sends cfg.count messages at cfg.rate, one write(2) each, paced exactly as lqbench
// --rate paces (internal/pace), then closes its side for writing. It notes the time of
// each write in sends and returns the time of the first slot.
func produce(c *net.TCPConn, cfg config, sends []atomic.Int64) (time.Time, error) {
	msg := make([]byte, cfg.size)
	for i := range msg[stampSize:] {
		msg[stampSize+i] = byte('a' + i%26)
	}
	interval := time.Duration(float64(time.Second) / float64(cfg.rate))
	pacer := pace.New()
	defer pacer.Close()
	start := time.Now()
	for i := 0; i < cfg.count; i++ {
		intended := start.Add(time.Duration(i) * interval)
		if time.Until(intended) > 0 {
			pace.Until(intended, pacer)
		}
		binary.BigEndian.PutUint64(msg[0:], uint64(intended.UnixNano()))
		binary.BigEndian.PutUint64(msg[8:], uint64(i))
		sends[i].Store(time.Now().UnixNano())
		if _, err := c.Write(msg); err != nil {
			return start, fmt.Errorf("write of message %d: %w", i, err)
		}
	}
	return start, c.CloseWrite()
}

// consumed is what the consumer measured.
type consumed struct {
	received int64
	last     time.Time // last message received
	hist     *hdrhistogram.Histogram
	sendHist *hdrhistogram.Histogram
}

// histMaxUs is the histograms' highest value: 100 s.
const histMaxUs = 100_000_000

// consume reads messages of size bytes from r until EOF and checks that exactly count arrive,
// each once and in order. It records each one's latency from its intended slot (the stamp)
// and from its write (sends, indexed by sequence number).
func consume(r io.Reader, size, count int, sends []atomic.Int64) (*consumed, error) {
	cs := &consumed{hist: hdrhistogram.New(1, histMaxUs, 3), sendHist: hdrhistogram.New(1, histMaxUs, 3)}
	buf := make([]byte, size)
	for {
		if _, err := io.ReadFull(r, buf); err != nil {
			if errors.Is(err, io.EOF) && cs.received == int64(count) {
				return cs, nil
			}
			return nil, fmt.Errorf("after %d of %d messages: %w", cs.received, count, err)
		}
		now := time.Now()
		if cs.received == int64(count) {
			return nil, fmt.Errorf("more than the %d messages sent", count)
		}
		seq := binary.BigEndian.Uint64(buf[8:])
		if seq != uint64(cs.received) {
			return nil, fmt.Errorf("message %d arrived where %d was expected (sent %d)", seq, cs.received, count)
		}
		cs.received++
		cs.last = now
		ns := now.UnixNano()
		_ = cs.hist.RecordValue(clampUs(ns - int64(binary.BigEndian.Uint64(buf))))
		if seq < uint64(len(sends)) {
			if at := sends[seq].Load(); at > 0 {
				_ = cs.sendHist.RecordValue(clampUs(ns - at))
			}
		}
	}
}

// clampUs converts ns to µs within the histograms' range.
func clampUs(ns int64) int64 {
	return min(max(ns/1000, 1), histMaxUs)
}

// selfCPUSeconds is the user + system CPU time this process has used.
func selfCPUSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}
