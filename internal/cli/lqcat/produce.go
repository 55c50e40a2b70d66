package lqcat

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
)

// produceConfig is a checked -P command line.
type produceConfig struct {
	topic           string
	files           []string // none: stdin; "-" is stdin
	wholeFiles      bool
	json            bool
	delim, keyDelim []byte
	key             []byte
	headers         []wire.RecordHeader
	partition       partFlag
	codec           wire.Codec
	acks            client.AckLevel
	count           int
}

// maxReported bounds the failures printed one by one; the rest are counted.
const maxReported = 10

// failures collects the messages that were not acknowledged. Safe for concurrent use.
type failures struct {
	mu    sync.Mutex
	n     int
	first error
	lines []string
}

func (f *failures) add(where string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	if f.first == nil {
		f.first = err
	}
	if len(f.lines) < maxReported {
		f.lines = append(f.lines, where+": "+err.Error()+hint(err))
	}
}

// produce sends the messages of stdin or the files and waits for their acknowledgements.
func (r *runner) produce(ctx context.Context, p produceConfig) error {
	p.json = r.c.json
	conn, err := r.connect(ctx, topicUserOrAdmin)
	if err != nil {
		return err
	}
	defer conn.Close()
	prod, err := conn.NewProducer(client.ProducerOptions{Topic: p.topic, Acks: p.acks, Compression: p.codec,
		DeliveryTimeout: r.c.deliveryTimeout})
	if err != nil {
		return fmt.Errorf("topic %q: %w", p.topic, err)
	}
	if err := p.partition.within(p.topic, prod.Partitions()); err != nil {
		prod.Close()
		return err
	}
	s := &sender{r: r, p: &p, prod: prod, lim: conn.Limits()}
	readErr := s.run(ctx)
	// Every message read gets its outcome: across reconnects, the delivery timeout bounds
	// the wait. After an interrupt, Close still flushes what was read, bounded by its
	// request timeout.
	var flushErr error
	if ctx.Err() == nil {
		flushErr = prod.Flush(context.WithoutCancel(ctx))
	}
	if err := prod.Close(); flushErr == nil {
		flushErr = err
	}
	s.wg.Wait()
	f := &s.fail
	if flushErr != nil && f.n == 0 && s.sent > 0 && !errors.Is(flushErr, client.ErrClosed) {
		f.add("flush", flushErr)
	}
	for _, l := range f.lines {
		fmt.Fprintln(r.stderr, redact("lqcat: "+l, r.secrets))
	}
	if f.n > len(f.lines) {
		fmt.Fprintf(r.stderr, "lqcat: ... and %d more failures\n", f.n-len(f.lines))
	}
	r.info("%d of %d messages acknowledged by topic %q", s.sent-f.n, s.sent, p.topic)
	if readErr != nil && !errors.Is(readErr, context.Canceled) {
		return readErr
	}
	if f.n > 0 {
		code := exitCode(f.first)
		if code == ExitOK {
			code = ExitFailed
		}
		return withCode(code, fmt.Errorf("%d of %d messages were not acknowledged", f.n, s.sent))
	}
	return nil
}

type sender struct {
	r    *runner
	p    *produceConfig
	prod *client.Producer
	lim  wire.Limits
	sent int // messages read (sent or failed)
	fail failures
	wg   sync.WaitGroup // callbacks outstanding
	msg  client.Message
}

// run reads every source and sends its messages; it stops at the -c count, an interrupt or
// a read error.
func (s *sender) run(ctx context.Context) error {
	files := s.p.files
	if len(files) == 0 {
		files = []string{"-"}
	}
	for _, name := range files {
		if s.done() {
			return nil
		}
		var in io.Reader = s.r.stdin
		label := "stdin"
		if name != "-" {
			f, err := os.Open(name)
			if err != nil {
				return withCode(ExitUsage, err)
			}
			in, label = f, name
			err = s.source(ctx, in, label)
			f.Close()
			if err != nil {
				return err
			}
			continue
		}
		if in == nil {
			in = bytes.NewReader(nil)
		}
		if err := s.source(ctx, in, label); err != nil {
			return err
		}
	}
	return nil
}

func (s *sender) done() bool { return s.p.count > 0 && s.sent >= s.p.count }

// source sends the messages of one input.
func (s *sender) source(ctx context.Context, in io.Reader, label string) error {
	if s.p.wholeFiles {
		data, err := io.ReadAll(io.LimitReader(in, int64(s.lim.MaxMessage)+1))
		if err != nil {
			return fmt.Errorf("%s: %w", label, err)
		}
		where := label
		if len(data) > s.lim.MaxMessage {
			s.sent++
			s.fail.add(where, &wire.Error{Code: wire.CodeMessageTooLarge, Message: fmt.Sprintf("file over %d bytes", s.lim.MaxMessage)})
			return nil
		}
		return s.send(ctx, where, s.plain(data))
	}
	max := s.lim.MaxMessage + len(s.p.keyDelim)
	if s.p.json {
		// A JSON line may escape every byte: base64 costs 4/3, \u00XX six times.
		max = 6*s.lim.MaxMessage + 64<<10
	}
	sp := splitter{br: bufio.NewReaderSize(in, 64<<10), delim: s.p.delim, max: max}
	for line := 1; !s.done(); line++ {
		msg, skipped, err := sp.next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", label, err)
		}
		where := fmt.Sprintf("%s: message %d", label, line)
		if skipped > 0 {
			s.sent++
			s.fail.add(where, &wire.Error{Code: wire.CodeMessageTooLarge, Message: fmt.Sprintf("%d bytes, limit %d", skipped, s.lim.MaxMessage)})
			continue
		}
		var m *client.Message
		if s.p.json {
			if len(bytes.TrimSpace(msg)) == 0 {
				continue
			}
			pj, err := parseJSONLine(msg)
			if err != nil {
				s.sent++
				s.fail.add(where, err)
				continue
			}
			s.msg = pj.msg
			s.msg.Headers = append(s.msg.Headers, s.p.headers...)
			s.override()
			m = &s.msg
		} else {
			m = s.plain(msg)
		}
		if err := s.send(ctx, where, m); err != nil {
			return err
		}
	}
	return nil
}

// plain makes a message of input bytes: -K, -k, -H and -p applied.
func (s *sender) plain(b []byte) *client.Message {
	s.msg = client.Message{Key: s.p.key, Value: b, Headers: s.p.headers}
	if len(s.p.keyDelim) > 0 {
		if i := bytes.Index(b, s.p.keyDelim); i >= 0 {
			s.msg.Key, s.msg.Value = b[:i], b[i+len(s.p.keyDelim):]
		}
	}
	s.override()
	return &s.msg
}

// override applies -p: a partition, or -1 for the producer's choice (key hash, else round
// robin), which also overrides a partition given in JSON input.
func (s *sender) override() {
	if !s.p.partition.set {
		return
	}
	s.msg.HasPartition = s.p.partition.v >= 0
	s.msg.Partition = max(s.p.partition.v, 0)
}

// send hands one message to the producer; a refusal counts as a failure of that message. It
// returns an error only when producing must stop.
func (s *sender) send(ctx context.Context, where string, m *client.Message) error {
	s.sent++
	s.wg.Add(1)
	err := s.prod.Send(ctx, m, func(_ client.Ack, err error) {
		if err != nil {
			s.fail.add(where, err)
		}
		s.wg.Done()
	})
	if err == nil {
		return nil
	}
	s.wg.Done()
	if ctx.Err() != nil {
		s.sent--
		return ctx.Err()
	}
	var we *wire.Error
	if errors.As(err, &we) && (we.Code == wire.CodeMessageTooLarge || we.Code == wire.CodeUnknownPartition) {
		s.fail.add(where, err)
		return nil
	}
	s.fail.add(where, err)
	return err
}

// splitter reads messages separated by a delimiter of one or more bytes, streaming: it holds
// one message at a time. A message longer than max is skipped, not held.
type splitter struct {
	br    *bufio.Reader
	delim []byte
	max   int
	buf   []byte
}

// next returns the next message (valid until the next call), or skipped > 0 with the size of
// a message over max, or io.EOF. The last message needs no delimiter.
func (s *splitter) next() (msg []byte, skipped int, err error) {
	d := s.delim
	s.buf = s.buf[:0]
	over, total := false, 0
	for {
		chunk, err := s.br.ReadSlice(d[len(d)-1])
		total += len(chunk)
		s.buf = append(s.buf, chunk...)
		if err == nil && bytes.HasSuffix(s.buf, d) {
			if over || len(s.buf)-len(d) > s.max {
				return nil, total - len(d), nil
			}
			return s.buf[:len(s.buf)-len(d)], 0, nil
		}
		if err == io.EOF {
			switch {
			case total == 0:
				return nil, 0, io.EOF
			case over || len(s.buf) > s.max:
				return nil, total, nil
			}
			return s.buf, 0, nil
		}
		if err != nil && err != bufio.ErrBufferFull {
			return nil, 0, err
		}
		if len(s.buf) > s.max+len(d) {
			// Too long: keep only what may begin a delimiter.
			over = true
			keep := len(d) - 1
			copy(s.buf, s.buf[len(s.buf)-keep:])
			s.buf = s.buf[:keep]
		}
	}
}
