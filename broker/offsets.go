package broker

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/lightq/lightq/wire"
)

// maxGroupsPerTopic bounds the committed-offset table of one topic.
const maxGroupsPerTopic = 10000

// offsetStore keeps consumer groups' committed offsets, one file per durable topic
// (data/topics/<topic>/offsets.json), rewritten atomically on every commit: temp file, fsync,
// rename, fsync of the directory. Commits run on the I/O pool, never on an event loop.
//
// Concurrency: all methods are safe for concurrent use. mu guards the tables; writeMu
// serialises file writes per store (commits are rare next to messages).
type offsetStore struct {
	dataDir string

	mu     sync.Mutex
	topics map[string]map[string]map[uint32]int64 // topic -> group -> partition -> next offset
	gone   map[string]bool                        // deleted topics: late commits are refused

	writeMu sync.Mutex
}

func newOffsetStore(dataDir string) *offsetStore {
	return &offsetStore{dataDir: dataDir, topics: map[string]map[string]map[uint32]int64{}, gone: map[string]bool{}}
}

func (o *offsetStore) path(topic string) string {
	return filepath.Join(o.dataDir, "topics", topic, "offsets.json")
}

// offsetFile is the on-disk form.
type offsetFile struct {
	FormatVersion int                         `json:"format_version"`
	Groups        map[string]map[string]int64 `json:"groups"` // group -> partition (decimal) -> offset
}

// load reads a topic's committed offsets at start. A missing file is an empty table.
func (o *offsetStore) load(topic string) error {
	data, err := os.ReadFile(o.path(topic))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var f offsetFile
	if err := json.Unmarshal(data, &f); err != nil || f.FormatVersion != 1 {
		return fmt.Errorf("%s: not a valid offsets file (%v)", o.path(topic), err)
	}
	groups := map[string]map[uint32]int64{}
	for g, parts := range f.Groups {
		groups[g] = map[uint32]int64{}
		for ps, off := range parts {
			p, err := strconv.ParseUint(ps, 10, 32)
			if err != nil {
				return fmt.Errorf("%s: bad partition %q", o.path(topic), ps)
			}
			groups[g][uint32(p)] = off
		}
	}
	o.mu.Lock()
	o.topics[topic] = groups
	o.mu.Unlock()
	return nil
}

// get returns the group's committed offset for a partition, or -1.
func (o *offsetStore) get(topic, group string, partition uint32) int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	if off, ok := o.topics[topic][group][partition]; ok {
		return off
	}
	return -1
}

// commit records and persists an offset. Blocking (fsync): call it from a worker.
func (o *offsetStore) commit(topic, group string, partition uint32, offset int64) error {
	o.writeMu.Lock()
	defer o.writeMu.Unlock()
	o.mu.Lock()
	if o.gone[topic] {
		o.mu.Unlock()
		return answer(wire.CodeUnknownTopic, "topic %q was deleted", topic)
	}
	groups := o.topics[topic]
	if groups == nil {
		groups = map[string]map[uint32]int64{}
		o.topics[topic] = groups
	}
	if groups[group] == nil {
		if len(groups) >= maxGroupsPerTopic {
			o.mu.Unlock()
			return answer(wire.CodeResourceLimit, "topic %q has %d consumer groups, the limit", topic, maxGroupsPerTopic)
		}
		groups[group] = map[uint32]int64{}
	}
	prev, had := groups[group][partition]
	groups[group][partition] = offset
	f := offsetFile{FormatVersion: 1, Groups: map[string]map[string]int64{}}
	for g, parts := range groups {
		f.Groups[g] = map[string]int64{}
		for p, off := range parts {
			f.Groups[g][strconv.FormatUint(uint64(p), 10)] = off
		}
	}
	o.mu.Unlock()
	data, err := json.MarshalIndent(&f, "", "  ")
	if err == nil {
		err = writeFileAtomic(o.path(topic), data)
	}
	if err != nil {
		o.mu.Lock()
		if had {
			groups[group][partition] = prev
		} else {
			delete(groups[group], partition)
		}
		o.mu.Unlock()
		return err
	}
	return nil
}

// drop forgets a deleted topic's offsets (its directory goes with it).
func (o *offsetStore) drop(topic string) {
	o.writeMu.Lock()
	defer o.writeMu.Unlock()
	o.mu.Lock()
	delete(o.topics, topic)
	o.gone[topic] = true
	o.mu.Unlock()
}

// revive allows commits for a topic created (again) under this name.
func (o *offsetStore) revive(topic string) {
	o.writeMu.Lock()
	defer o.writeMu.Unlock()
	o.mu.Lock()
	delete(o.gone, topic)
	o.mu.Unlock()
}

// writeFileAtomic replaces path with data: a crash leaves either the old or the new file.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// durablePartition resolves topic and partition for the offset requests.
func (c *conn) durablePartition(corr uint32, topicName string, partition uint32) (*topic, *partition) {
	t := c.lookupTopic(corr, []byte(topicName))
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
	if p.dlog.err != nil {
		c.sendStorageErrorCode(corr, wire.CodeStorageError, t.name, p.id, p.dlog.err)
		return nil, nil
	}
	return t, p
}

func (c *conn) handleListOffsets(corr uint32, body []byte) {
	var m wire.ListOffsets
	if !c.decodeOr(corr, wire.OpListOffsets, m.Decode(body)) {
		return
	}
	_, p := c.durablePartition(corr, m.Topic, m.Partition)
	if p == nil {
		return
	}
	l := p.dlog.log
	var off int64
	switch m.Mode {
	case wire.OffsetEarliest:
		off = l.StartOffset()
	case wire.OffsetLatest:
		off = p.dlog.visibleLimit(wire.IsolationDurable)
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
	t, p := c.durablePartition(corr, m.Topic, m.Partition)
	if p == nil {
		return
	}
	if next := p.dlog.log.NextOffset(); m.Offset < 0 || m.Offset > next {
		c.sendError(corr, wire.CodeOffsetOutOfRange, fmt.Sprintf("offset %d outside [0, %d]", m.Offset, next))
		return
	}
	store, topicName := c.srv.offsets, t.name
	ok := c.srv.metaPool.Submit(func() {
		err := store.commit(topicName, m.Group, m.Partition, m.Offset)
		c.complete(func(c *conn) {
			c.reply(corr, err, func() { c.respondEmpty(wire.OpCommitOffset, corr) })
		})
	})
	if !ok {
		c.sendError(corr, wire.CodeResourceLimit, "broker is busy writing offsets; retry")
	}
}

func (c *conn) handleFetchCommitted(corr uint32, body []byte) {
	var m wire.FetchCommitted
	if !c.decodeOr(corr, wire.OpFetchCommitted, m.Decode(body)) {
		return
	}
	t, p := c.durablePartition(corr, m.Topic, m.Partition)
	if p == nil {
		return
	}
	resp := wire.OffsetResponse{Offset: c.srv.offsets.get(t.name, m.Group, m.Partition)}
	c.respond(wire.OpFetchCommitted, corr, resp.AppendTo)
}
