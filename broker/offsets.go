package broker

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/lightq/lightq/log/offsetlog"
	"github.com/lightq/lightq/wire"
)

// offsetStore keeps consumer groups' committed offsets: one offsetlog.Store per durable
// topic (data/topics/<topic>/offsets.log, see package offsetlog), found through a
// copy-on-write map, so a commit takes no lock shared with other topics: it appends to its
// topic's pending frame and returns, and the topic's syncer answers it after the fsync
// (group commit). The (group, partition) pairs are capped per topic and, through a shared
// offsetlog.Budget, per broker (Config.MaxCommittedOffsetsPerTopic, MaxCommittedOffsets).
//
// Concurrency: lookup is lock-free and safe anywhere. load, create, drop and close change
// the map; they run at start, under Server.adminMu, or at shutdown, so never two at once.
type offsetStore struct {
	dataDir     string
	maxPerTopic int
	budget      *offsetlog.Budget
	logf        func(format string, args ...any)

	stores atomic.Pointer[map[string]*topicOffsets] // copy on write
}

// topicOffsets is one durable topic's committed offsets. err is set when the store could not
// be opened (its file is damaged): the topic's commits and FETCH_COMMITTED answer
// STORAGE_ERROR and the files are left for an operator.
type topicOffsets struct {
	st  *offsetlog.Store
	err error
}

func newOffsetStore(dataDir string, maxPerTopic, maxTotal int, logf func(string, ...any)) *offsetStore {
	o := &offsetStore{dataDir: dataDir, maxPerTopic: maxPerTopic, budget: offsetlog.NewBudget(int64(maxTotal)), logf: logf}
	o.stores.Store(&map[string]*topicOffsets{})
	return o
}

func (o *offsetStore) dir(topic string) string { return filepath.Join(o.dataDir, "topics", topic) }

// legacyFileName is the offsets file of format 1 (JSON, rewritten on every commit), read
// to migrate a topic that has no offsets log yet.
const legacyFileName = "offsets.json"

// legacyFile is the on-disk form of offsets.json.
type legacyFile struct {
	FormatVersion int                         `json:"format_version"`
	Groups        map[string]map[string]int64 `json:"groups"` // group -> partition (decimal) -> offset
}

// readLegacy hands the entries of a topic's offsets.json to add. A missing file has none.
func readLegacy(path string, add func(offsetlog.Entry)) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var f legacyFile
	if err := json.Unmarshal(data, &f); err != nil || f.FormatVersion != 1 {
		return fmt.Errorf("%s: not a valid offsets file (%v)", path, err)
	}
	for g, parts := range f.Groups {
		for ps, off := range parts {
			p, err := strconv.ParseUint(ps, 10, 32)
			if err != nil {
				return fmt.Errorf("%s: bad partition %q", path, ps)
			}
			add(offsetlog.Entry{Group: g, Partition: uint32(p), Offset: off})
		}
	}
	return nil
}

// open opens (recovering, or migrating from offsets.json) a topic's store. It blocks on
// I/O: at start, or on the auth pool.
func (o *offsetStore) open(topic string) *topicOffsets {
	dir := o.dir(topic)
	st, err := offsetlog.Open(dir, offsetlog.Options{
		MaxEntries: o.maxPerTopic,
		Budget:     o.budget,
		Legacy: func(add func(offsetlog.Entry)) error {
			return readLegacy(filepath.Join(dir, legacyFileName), add)
		},
		Logf: func(format string, args ...any) { o.logf("topic "+strconv.Quote(topic)+": "+format, args...) },
	})
	return &topicOffsets{st: st, err: err}
}

func (o *offsetStore) publish(topic string, to *topicOffsets) {
	old := *o.stores.Load()
	m := make(map[string]*topicOffsets, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	if to == nil {
		delete(m, topic)
	} else {
		m[topic] = to
	}
	o.stores.Store(&m)
}

// load opens a durable topic's store at start. An error (a damaged file) is also kept: that
// topic's offset requests answer STORAGE_ERROR.
func (o *offsetStore) load(topic string) error {
	to := o.open(topic)
	o.publish(topic, to)
	return to.err
}

// create opens the store of a durable topic being created (under adminMu, on the auth pool).
func (o *offsetStore) create(topic string) {
	to := o.open(topic)
	if to.err != nil {
		o.logf("topic %q: committed offsets cannot be stored: %v", topic, to.err)
	}
	o.publish(topic, to)
}

// lookup returns a topic's store, or nil when the topic is not durable or was deleted.
func (o *offsetStore) lookup(topic string) *topicOffsets { return (*o.stores.Load())[topic] }

// drop closes a deleted topic's store (commits in flight are written and answered first;
// later ones get UNKNOWN_TOPIC) and forgets it; its directory goes with the topic.
func (o *offsetStore) drop(topic string) {
	to := o.lookup(topic)
	if to == nil {
		return
	}
	o.publish(topic, nil)
	if to.st != nil {
		if err := to.st.Close(); err != nil {
			o.logf("topic %q: closing committed offsets: %v", topic, err)
		}
	}
}

// close closes every store at shutdown, after the commits in flight are answered.
func (o *offsetStore) close() {
	for topic := range *o.stores.Load() {
		o.drop(topic)
	}
}

// commitAnswer turns a store's refusal or failure into the client's answer.
func commitAnswer(topic string, err error) error {
	if err == nil {
		return nil
	}
	if a, ok := replicatedCommitAnswer(topic, err); ok {
		return a
	}
	var le *offsetlog.LimitError
	switch {
	case errors.As(err, &le) && le.Scope == "topic":
		return answer(wire.CodeResourceLimit, "topic %q holds %d committed (group, partition) pairs, its limit: commit only to pairs already stored, or delete and recreate the topic", topic, le.Max)
	case errors.As(err, &le):
		return answer(wire.CodeResourceLimit, "the broker holds %d committed (group, partition) pairs, its limit: commit only to pairs already stored", le.Max)
	case errors.Is(err, offsetlog.ErrBusy):
		return answer(wire.CodeResourceLimit, "commits to topic %q arrive faster than they can be written; retry", topic)
	case errors.Is(err, offsetlog.ErrClosed):
		return answer(wire.CodeUnknownTopic, "topic %q was deleted", topic)
	case errors.Is(err, offsetlog.ErrInvalid):
		return answer(wire.CodeInvalidRequest, "%s", strings.TrimPrefix(err.Error(), "offsetlog: "))
	}
	return err // STORAGE_ERROR; its text (server paths) goes to the broker's log only
}

// durablePartition resolves topic and partition for the offset requests.
func (c *conn) durablePartition(corr uint32, op wire.Op, topicName string, partition uint32) (*topic, *partition) {
	t := c.lookupTopic(corr, op, []byte(topicName))
	if t == nil {
		return nil, nil
	}
	if t.kind != wire.KindDurable {
		c.sendError(corr, wire.CodeNotSupported, fmt.Sprintf("topic %q is transient: it has no stored offsets", t.name))
		return nil, nil
	}
	if int(partition) >= len(t.parts) {
		c.sendError(corr, wire.CodeUnknownPartition, fmt.Sprintf("topic %q has partitions 0-%d, not %d", t.name, len(t.parts)-1, partition))
		return nil, nil
	}
	p := t.parts[partition]
	if p.dlog() == nil || op == wire.OpListOffsets && !c.readableHere(corr, t, p) {
		if p.dlog() == nil {
			c.notLeader(corr, t, p, p.repl.leader()) // a replicated partition held elsewhere
		}
		return nil, nil
	}
	if p.dlog().err != nil {
		c.sendStorageErrorCode(corr, wire.CodeStorageError, t.name, p.id, p.dlog().err)
		return nil, nil
	}
	return t, p
}

func (c *conn) handleListOffsets(corr uint32, body []byte) {
	var m wire.ListOffsets
	if !c.decodeOr(corr, wire.OpListOffsets, m.Decode(body)) {
		return
	}
	_, p := c.durablePartition(corr, wire.OpListOffsets, m.Topic, m.Partition)
	if p == nil {
		return
	}
	l := p.dlog().log
	var off int64
	switch m.Mode {
	case wire.OffsetEarliest:
		off = l.StartOffset()
	case wire.OffsetLatest:
		off = p.dlog().visibleLimit(wire.IsolationDurable)
	case wire.OffsetTimestamp:
		// The time index finds the batch; its records are read on a worker (disk, maybe
		// decompression) to find the first record at or after the time.
		ok := c.srv.metaPool.Submit(func() {
			off, err := l.OffsetForTime(m.Timestamp)
			c.complete(func(c *conn) {
				if err != nil {
					c.sendStorageError(corr, string(m.Topic), m.Partition, err)
					return
				}
				resp := wire.OffsetResponse{Offset: off}
				c.respond(wire.OpListOffsets, corr, resp.AppendTo)
			})
		})
		if !ok {
			c.sendError(corr, wire.CodeResourceLimit, "broker is busy reading; retry")
		}
		return
	default:
		c.sendError(corr, wire.CodeInvalidRequest, fmt.Sprintf("offset mode %d", m.Mode))
		return
	}
	resp := wire.OffsetResponse{Offset: off}
	c.respond(wire.OpListOffsets, corr, resp.AppendTo)
}

func (c *conn) handleCommitOffset(corr uint32, body []byte) {
	var m wire.CommitOffset
	if !c.decodeOr(corr, wire.OpCommitOffset, m.Decode(body)) {
		return
	}
	if m.Group == "" {
		c.sendError(corr, wire.CodeInvalidRequest, "COMMIT_OFFSET needs a group name")
		return
	}
	if c.srv.cluster != nil {
		c.commitOffsetReplicated(corr, &m)
		return
	}
	t, p := c.durablePartition(corr, wire.OpCommitOffset, m.Topic, m.Partition)
	if p == nil {
		return
	}
	if c.srv.groups.HasMembers(t.name, m.Group) {
		c.sendError(corr, wire.CodeGroupNotEmpty, fmt.Sprintf("group %q of topic %q has live members: only they commit for it (GROUP_COMMIT); stop them first", m.Group, t.name))
		return
	}
	c.commit(corr, wire.OpCommitOffset, t, p, m.Group, m.Offset)
}

// commit stores a checked COMMIT_OFFSET or GROUP_COMMIT (op) in the topic's offsets log; the
// topic's syncer answers it once it is durable.
func (c *conn) commit(corr uint32, op wire.Op, t *topic, p *partition, group string, offset int64) {
	if next := p.dlog().log.NextOffset(); offset < 0 || offset > next {
		c.sendError(corr, wire.CodeOffsetOutOfRange, fmt.Sprintf("offset %d outside [0, %d]", offset, next))
		return
	}
	to := c.srv.offsets.lookup(t.name)
	if to == nil || to.err != nil {
		c.offsetsUnavailable(corr, t.name, to)
		return
	}
	topicName := t.name
	c.commitWaits++
	err := to.st.Commit(group, p.id, offset, func(err error) {
		if err == nil {
			c.srv.metrics.noteGroup(to.st, topicName, group)
		}
		c.commitAnswered(commitResult{corr: corr, op: op, topic: topicName, err: err})
	})
	if err != nil {
		c.commitWaits--
		c.reply(corr, commitAnswer(topicName, err), nil)
	}
}

// maxCommitsInFlight is how many of one connection's commits may wait for their fsync before
// the connection's loop reads no more of its frames (until answers go out): the client's
// pipelining beyond it waits in its socket. Without it, a client pipelining thousands of
// commits had each of its loop turns handle thousands of frames and answers while the other
// connections of the loop waited: with 1,024 in flight on each of 8 connections, another
// tenant's commit p99 was 8-29 ms, and 2.7-4.0 ms with this cap (TestCommitFlood's flood on
// the 2-vCPU VM). 64 commits in flight still give one connection 64 commits per fsync: 274,000
// commits/s on that VM (BenchmarkCommitThroughput with one connection), whose fdatasync takes
// about 0.1 ms; on a disk whose fsync takes 1 ms, 64,000.
const maxCommitsInFlight = 64

// commitResult is a COMMIT_OFFSET that its topic's offsets syncer wrote (err nil) or failed,
// waiting for the connection's loop to answer it.
type commitResult struct {
	corr  uint32
	op    wire.Op // the request answered
	topic string
	err   error
}

// commitAnswered queues a commit's answer and wakes the connection's loop. Safe from any
// goroutine; it runs on the offsets syncer, once per commit of the group commit just written.
//
// Unlike complete, it queues no closure (the queue's memory is reused) and its wake is
// coalesced: one group commit answers up to thousands of commits, often many of one
// connection, and a forced wake per commit (a gnet task, an OnTraffic and a write(2) each)
// made a flood of commits cost the broker about 1.5 times the CPU per commit and queued
// every other connection of the loop behind those tasks (TestCommitFlood, docs/PERFORMANCE.md).
// A coalesced wake is enough: a pending wake's onTraffic clears the flag before it takes
// the queue, so an answer queued after that either finds the flag clear and wakes again,
// or is taken by that onTraffic.
func (c *conn) commitAnswered(r commitResult) {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return
	}
	c.commits = append(c.commits, r)
	c.mu.Unlock()
	c.wake()
}

// answerCommits answers the commits the offsets syncers handed back (commitAnswered). Runs on
// the loop; with c.closed() true (onClose) nothing is queued any more.
func (c *conn) answerCommits(rs []commitResult) {
	c.commitWaits -= len(rs)
	for _, r := range rs {
		if r.err == nil {
			c.respondEmpty(r.op, r.corr)
			continue
		}
		c.reply(r.corr, commitAnswer(r.topic, r.err), nil)
	}
}

// offsetsUnavailable answers an offset request for a topic whose store is gone (the topic
// was deleted meanwhile) or could not be opened.
func (c *conn) offsetsUnavailable(corr uint32, topic string, to *topicOffsets) {
	if to == nil {
		c.sendError(corr, wire.CodeUnknownTopic, fmt.Sprintf("topic %q was deleted", topic))
		return
	}
	c.log.Warn().Err(to.err).Str("topic", topic).Msg("committed offsets unavailable")
	c.sendError(corr, wire.CodeStorageError, fmt.Sprintf("topic %q: the committed offsets file is damaged and serves nothing until repaired; the broker's log says where", topic))
}

func (c *conn) handleFetchCommitted(corr uint32, body []byte) {
	var m wire.FetchCommitted
	if !c.decodeOr(corr, wire.OpFetchCommitted, m.Decode(body)) {
		return
	}
	if c.srv.cluster != nil {
		c.fetchCommittedReplicated(corr, &m)
		return
	}
	t, p := c.durablePartition(corr, wire.OpFetchCommitted, m.Topic, m.Partition)
	if p == nil {
		return
	}
	to := c.srv.offsets.lookup(t.name)
	if to == nil || to.err != nil {
		c.offsetsUnavailable(corr, t.name, to)
		return
	}
	resp := wire.OffsetResponse{Offset: -1}
	if off, ok := to.st.Get(m.Group, m.Partition); ok {
		resp.Offset = off
	}
	c.respond(wire.OpFetchCommitted, corr, resp.AppendTo)
}
