package lqcat

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
)

// consumeConfig is a checked -C command line.
type consumeConfig struct {
	topic      string
	partition  partFlag
	start      offsetSpec
	count      int
	exitEOF    bool
	group      string
	format     format // nil with json
	json       bool
	delim      []byte // after each JSON object
	unbuffered bool
	// stopOnCorrupt (--on-corrupt stop) ends at a batch that cannot be decoded, instead of
	// skipping it.
	stopOnCorrupt bool
}

type startKind uint8

const (
	startDefault   startKind = iota // beginning on durable topics, live on transient ones
	startBeginning                  // -o beginning
	startEnd                        // -o end
	startAbsolute                   // -o N
	startRelative                   // -o -N: N before the end
	startTime                       // -o s@MS
)

// offsetSpec is what -o says: where to start and, with e@, where to stop.
type offsetSpec struct {
	kind    startKind
	n       int64 // offset, count or unix ms
	stopAt  int64 // e@: unix ms
	hasStop bool
	text    string
	stored  bool // -o stored: the group's committed offsets, which -G uses anyway (kind stays startDefault)
}

// parseOffset reads the -o values (one start and at most one e@, comma-separated or from
// repeated -o flags).
func parseOffset(vals []string) (offsetSpec, error) {
	var o offsetSpec
	o.text = strings.Join(vals, ",")
	for _, v := range vals {
		switch {
		case v == "beginning" || v == "earliest":
			o.setStart(startBeginning, 0)
		case v == "end" || v == "latest":
			o.setStart(startEnd, 0)
		case v == "stored":
			if o.kind != startDefault || o.stored {
				o.kind = 255
			}
			o.stored = true
		case strings.HasPrefix(v, "s@"), strings.HasPrefix(v, "e@"):
			ms, err := strconv.ParseInt(v[2:], 10, 64)
			if err != nil || ms < 0 {
				return o, fmt.Errorf("%q: want %s<unix milliseconds>", v, v[:2])
			}
			if v[0] == 'e' {
				if o.hasStop {
					return o, fmt.Errorf("e@ given twice")
				}
				o.stopAt, o.hasStop = ms, true
				continue
			}
			o.setStart(startTime, ms)
		default:
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return o, fmt.Errorf("%q: want beginning, end, stored, N, -N, s@MS or e@MS", v)
			}
			if n < 0 {
				o.setStart(startRelative, -n)
			} else {
				o.setStart(startAbsolute, n)
			}
		}
		if o.kind == 255 {
			return o, fmt.Errorf("two start offsets in %q", o.text)
		}
	}
	return o, nil
}

func (o *offsetSpec) setStart(k startKind, n int64) {
	if o.kind != startDefault || o.stored {
		o.kind = 255 // two starts: parseOffset reports it
		return
	}
	o.kind, o.n = k, n
}

// output serialises and buffers what consumers print. Callers hold mu around write.
type output struct {
	mu         sync.Mutex
	w          *bufio.Writer
	cc         *consumeConfig
	buf        []byte
	dirty      bool
	err        error
	printed    int
	skipped    int // batches that could not be decoded
	flushEvery time.Duration
}

func newOutput(w io.Writer, cc *consumeConfig) *output {
	return &output{w: bufio.NewWriterSize(w, 64<<10), cc: cc, flushEvery: 100 * time.Millisecond}
}

// write prints one message; the caller holds o.mu.
func (o *output) write(r *client.Received) error {
	if o.err != nil {
		return o.err
	}
	if o.cc.json {
		o.buf = appendJSON(o.buf[:0], o.cc.topic, r)
		o.buf = append(o.buf, o.cc.delim...)
	} else {
		o.buf = o.cc.format.render(o.buf[:0], o.cc.topic, r)
	}
	o.printed++
	if _, o.err = o.w.Write(o.buf); o.err == nil && o.cc.unbuffered {
		o.err = o.w.Flush()
	}
	o.dirty = !o.cc.unbuffered
	return o.err
}

func (o *output) flush() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.err == nil {
		o.err = o.w.Flush()
		o.dirty = false
	}
	return o.err
}

// skip tells on stderr that a batch that cannot be decoded is skipped, after writing out the
// messages printed before it; the caller holds o.mu.
func (r *runner) skip(o *output, e *client.CorruptBatchError) {
	if o.err == nil && o.dirty {
		o.err, o.dirty = o.w.Flush(), false
	}
	o.skipped++
	r.warn("topic %q partition %d offsets %d-%d: cannot decode batch: %v; skipped", e.Topic, e.Partition, e.FirstOffset, e.LastOffset, e.Err)
}

// onCorrupt is the client's OnCorruptBatch for cc: nil (stop) with --on-corrupt stop, else
// skip. read, when not nil, is called first with o.mu held: it counts the batch as read and
// says whether it is one lqcat was asked for (and so reports it); it may end the run.
func (r *runner) onCorrupt(cc *consumeConfig, o *output, read func(*client.CorruptBatchError) bool) func(*client.CorruptBatchError) error {
	if cc.stopOnCorrupt {
		return nil
	}
	return func(e *client.CorruptBatchError) error {
		o.mu.Lock()
		defer o.mu.Unlock()
		if read == nil || read(e) {
			r.skip(o, e)
		}
		return nil
	}
}

// errStop ends the consumers once lqcat printed what it was asked for.
var errStop = errors.New("enough")

// consume prints messages of a durable or transient topic.
func (r *runner) consume(ctx context.Context, cc consumeConfig) error {
	conn, err := r.connect(ctx, topicUserOrAdmin)
	if err != nil {
		return err
	}
	defer conn.Close()
	mctx, cancel := r.reqCtx(ctx)
	md, err := topicMetadata(mctx, conn, cc.topic)
	cancel()
	if err != nil {
		return err
	}
	if err := cc.partition.within(cc.topic, len(md.Partitions)); err != nil {
		return err
	}
	out := newOutput(r.stdout, &cc)
	var werr error
	switch {
	case md.Kind == wire.KindTransient:
		werr = r.consumeLive(ctx, conn, &cc, out)
	case cc.group != "" && !cc.partition.set:
		werr = r.consumeBalanced(ctx, conn, &cc, out)
	default:
		werr = r.consumeDurable(ctx, conn, &cc, md, out)
	}
	if ferr := out.flush(); werr == nil && ferr != nil {
		werr = fmt.Errorf("stdout: %w", ferr)
	}
	r.info("%d messages printed from topic %q", out.printed, cc.topic)
	if werr == nil && out.skipped > 0 {
		werr = withCode(ExitFailed, fmt.Errorf("topic %q: %d %s could not be decoded and %s skipped (see above)",
			cc.topic, out.skipped, plural(out.skipped, "batch", "batches"), plural(out.skipped, "was", "were")))
	}
	return werr
}

// ticker calls fn every d until stop is closed.
func ticker(d time.Duration, stop <-chan struct{}, fn func()) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				fn()
			case <-stop:
				return
			}
		}
	})
	return &wg
}

// consumeLive subscribes to a transient topic: messages from now on.
func (r *runner) consumeLive(ctx context.Context, conn *client.Conn, cc *consumeConfig, out *output) error {
	switch {
	case cc.start.kind != startDefault && cc.start.kind != startEnd:
		return withCode(ExitUnsupported, fmt.Errorf("topic %q is transient: it is streamed live from now on, so only -o end applies (not -o %s)", cc.topic, cc.start.text))
	case cc.start.hasStop:
		return withCode(ExitUnsupported, fmt.Errorf("topic %q is transient: -o e@ needs a log to read back; stop with -c N instead", cc.topic))
	case cc.exitEOF:
		return withCode(ExitUnsupported, fmt.Errorf("topic %q is transient: a live stream has no end for -e; stop with -c N instead", cc.topic))
	}
	sub, err := conn.Subscribe(ctx, client.SubscribeOptions{Topic: cc.topic, Partition: cc.partition.v, HasPartition: cc.partition.set, QueueGroup: cc.group,
		OnCorruptBatch: r.onCorrupt(cc, out, nil)})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("topic %q: subscribe: %w", cc.topic, err)
	}
	defer sub.Close()
	r.info("subscribed to transient topic %q (%d partitions), live from now", cc.topic, sub.Partitions())
	stop := make(chan struct{})
	wg := ticker(out.flushEvery, stop, func() { _ = out.flush() })
	defer func() { close(stop); wg.Wait() }()
	err = sub.Each(ctx, func(m *client.Received) error {
		if m.Dropped > 0 {
			r.warn("topic %q partition %d: %d messages dropped before offset %d (lqcat fell behind)", cc.topic, m.Partition, m.Dropped, m.Offset)
		}
		out.mu.Lock()
		defer out.mu.Unlock()
		if err := out.write(m); err != nil {
			return err
		}
		if cc.count > 0 && out.printed >= cc.count {
			return errStop
		}
		return nil
	})
	switch {
	case errors.Is(err, errStop), ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return nil
	case out.err != nil:
		return fmt.Errorf("stdout: %w", out.err)
	}
	return fmt.Errorf("topic %q: %w", cc.topic, err)
}

// progress is one durable partition's state; guarded by output.mu.
type progress struct {
	end       int64 // the end of the log when lqcat started
	done      bool
	next      int64 // offset after the last message printed, -1 before one
	committed int64
	k         *client.Consumer
}

// consumeDurable reads a durable topic by offset: every partition, or -p's. With -G (and -p)
// it stores its positions for the group (offset-only: refused while the group has members).
func (r *runner) consumeDurable(ctx context.Context, conn *client.Conn, cc *consumeConfig, md wire.TopicMetadata, out *output) error {
	var ids []int32
	for _, pm := range md.Partitions {
		if !cc.partition.set || int32(pm.ID) == cc.partition.v {
			ids = append(ids, int32(pm.ID))
		}
	}
	prefetch := min(max(32<<20/len(ids), 64<<10), 4<<20)
	opts := client.ConsumerOptions{
		Topic: cc.topic, Group: cc.group, OffsetsOnly: cc.group != "", Partitions: ids, AutoCommit: -1, Prefetch: prefetch, MaxBytes: min(prefetch, 1<<20),
		OnError: func(err error) { r.warn("%v", err) },
	}
	// Set once the handler below exists: a skipped batch counts as read, for -e and commits.
	var skippedBatch func(*client.CorruptBatchError) bool
	// -o -N and s@ start each partition at its own offset.
	switch cc.start.kind {
	case startRelative:
		opts.Starts = map[int32]client.StartPosition{}
		for _, pm := range md.Partitions {
			opts.Starts[int32(pm.ID)] = client.AtOffset(max(pm.StartOffset, pm.EndOffset-cc.start.n))
		}
	case startTime:
		// Exact per partition: see offsetForTime.
		opts.Starts = map[int32]client.StartPosition{}
		for _, id := range ids {
			tctx, cancel := r.reqCtx(ctx)
			off, err := offsetForTime(tctx, conn, cc.topic, uint32(id), cc.start.n)
			cancel()
			if err != nil {
				return fmt.Errorf("topic %q partition %d: -o s@%d: %w", cc.topic, id, cc.start.n, err)
			}
			opts.Starts[id] = client.AtOffset(off)
		}
	case startEnd:
		opts.Start = client.Latest()
	case startAbsolute:
		opts.Start = client.AtOffset(cc.start.n)
	default:
		opts.Start = client.Earliest()
	}

	prog := make(map[int32]*progress, len(ids))
	for _, pm := range md.Partitions {
		prog[int32(pm.ID)] = &progress{end: pm.EndOffset, next: -1, committed: -1}
	}
	opts.OnCorruptBatch = r.onCorrupt(cc, out, func(e *client.CorruptBatchError) bool { return skippedBatch(e) })
	k, err := conn.NewConsumer(ctx, opts)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("topic %q: %w", cc.topic, err)
	}
	defer k.Close()
	consumers := []*client.Consumer{k}
	for _, id := range ids {
		prog[id].k = k
	}

	// Which partitions are finished before anything is read.
	eof := cc.exitEOF || cc.start.hasStop && cc.start.stopAt <= time.Now().UnixMilli()
	bounded := eof || cc.start.hasStop
	remaining := len(ids)
	for _, id := range ids {
		// A start beyond the end is out of range with -e as without it (where the consumer's
		// first fetch reports it): -e must not turn a wrong offset into a silent success.
		if p := prog[id]; eof && p.k.Position(id) > p.end {
			return withCode(ExitOutOfRange, fmt.Errorf("topic %q partition %d: offset %d is beyond the end of the log (%d)", cc.topic, id, p.k.Position(id), p.end))
		}
		if p := prog[id]; eof && p.k.Position(id) >= p.end {
			p.done = true
			remaining--
		}
	}
	if bounded && remaining == 0 {
		return nil
	}

	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	finished := false // guarded by out.mu
	handler := func(m *client.Received) error {
		out.mu.Lock()
		defer out.mu.Unlock()
		if finished {
			return errStop
		}
		p := prog[m.Partition]
		if p.done {
			return nil // finished partition: the rest is not ours to print
		}
		if cc.start.hasStop && m.Timestamp.UnixMilli() >= cc.start.stopAt {
			p.done = true
			remaining--
		} else {
			if err := out.write(m); err != nil {
				return err
			}
			p.next = m.Offset + 1
			if eof && p.next >= p.end {
				p.done = true
				remaining--
			}
		}
		if cc.count > 0 && out.printed >= cc.count || bounded && remaining == 0 {
			finished = true
			stopRun()
			return errStop
		}
		return nil
	}
	skippedBatch = func(e *client.CorruptBatchError) bool { // out.mu held; like handler
		p := prog[e.Partition]
		if finished || p.done {
			return false // after what lqcat prints
		}
		p.next = max(p.next, e.LastOffset+1)
		if eof && p.next >= p.end {
			p.done = true
			remaining--
		}
		if bounded && remaining == 0 {
			finished = true
			stopRun()
		}
		return true
	}
	commit := func(ctx context.Context) error {
		if cc.group == "" {
			return nil
		}
		byConsumer := make(map[*client.Consumer]map[int32]int64)
		out.mu.Lock()
		for id, p := range prog {
			if p.next > p.committed && p.k != nil {
				if byConsumer[p.k] == nil {
					byConsumer[p.k] = make(map[int32]int64)
				}
				byConsumer[p.k][id] = p.next
			}
		}
		out.mu.Unlock()
		var errs []error
		for k, offs := range byConsumer {
			if err := k.CommitOffsets(ctx, offs); err != nil {
				errs = append(errs, err)
				continue
			}
			out.mu.Lock()
			for id, off := range offs {
				prog[id].committed = max(prog[id].committed, off)
			}
			out.mu.Unlock()
		}
		return errors.Join(errs...)
	}

	// passedEnd finishes, for -e, the partitions whose position reached the end without a
	// message there to print: a control batch (PROTOCOL.md section 7) at the end of the log
	// takes an offset and carries none. out.mu held.
	passedEnd := func() {
		for id, p := range prog {
			if p.k == nil || p.done || !eof {
				continue
			}
			if pos := p.k.Position(id); pos >= p.end {
				p.next, p.done = max(p.next, pos), true
				remaining--
			}
		}
		if bounded && remaining == 0 && !finished {
			finished = true
			stopRun()
		}
	}
	stop := make(chan struct{})
	ticks := 0
	wg := ticker(out.flushEvery, stop, func() {
		_ = out.flush()
		out.mu.Lock()
		passedEnd()
		out.mu.Unlock()
		if ticks++; ticks%10 == 0 {
			cctx, cancel := context.WithTimeout(runCtx, 10*time.Second)
			if err := commit(cctx); err != nil && runCtx.Err() == nil {
				r.warn("commit: %v", err)
			}
			cancel()
		}
	})
	errc := make(chan error, len(consumers))
	for _, k := range consumers {
		go func() { errc <- k.Each(runCtx, handler) }()
	}
	var first error
	for range consumers {
		err := <-errc
		if err == nil || errors.Is(err, errStop) || errors.Is(err, context.Canceled) || errors.Is(err, client.ErrClosed) {
			continue
		}
		if first == nil {
			first = err
			stopRun()
		}
	}
	close(stop)
	wg.Wait()
	if out.err != nil && first == nil {
		first = fmt.Errorf("stdout: %w", out.err)
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := commit(cctx); err != nil && first == nil {
		first = fmt.Errorf("group %q: %w", cc.group, err)
	}
	if first != nil && !strings.Contains(first.Error(), cc.topic) {
		first = fmt.Errorf("topic %q: %w", cc.topic, first)
	}
	return first
}
