package broker

import (
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/lightq/lightq/broker/auth"
	"github.com/lightq/lightq/broker/meta"
	"github.com/lightq/lightq/broker/ring"
	"github.com/lightq/lightq/wire"
)

// This file holds the topic registry's changes: CREATE_TOPIC and DELETE_TOPIC, run on the
// auth pool under Server.adminMu, and building a live topic from its metadata. Both need the
// admin role, which handle checks (authz.go).

func (c *conn) handleCreateTopic(corr uint32, body []byte) {
	var m wire.CreateTopic
	if !c.decodeOr(corr, wire.OpCreateTopic, m.Decode(body)) {
		return
	}
	s, log := c.srv, c.log
	c.runBackground(corr, wire.OpCreateTopic, func() (func(*conn), time.Duration) {
		// Once started, the change is made even if the connection closes meanwhile (its
		// answer is then lost; PROTOCOL.md says so), so it is logged here, not in the answer.
		err := s.createTopic(&m)
		if err == nil {
			log.Info().Str("topic", m.Name).Str("kind", m.Kind.String()).Uint32("partitions", m.Partitions).Msg("topic created")
		}
		return func(c *conn) {
			c.reply(corr, err, func() { c.respondEmpty(wire.OpCreateTopic, corr) })
		}, 0
	})
}

// createTopic validates, hashes, persists and publishes a new topic, and gives the user it
// names (created when new) both roles on it. Runs on a worker. The names are checked here,
// against the rules of wire (which meta.Update enforces again), so a bad one is
// INVALID_REQUEST before anything is hashed or written.
func (s *Server) createTopic(m *wire.CreateTopic) error {
	if err := wire.ValidTopicName(m.Name); err != nil {
		return answer(wire.CodeInvalidRequest, "%v", err)
	}
	if m.User != "" {
		if err := wire.ValidUserName(m.User); err != nil {
			return answer(wire.CodeInvalidRequest, "%v", err)
		}
	}
	switch {
	case m.Kind != wire.KindTransient && m.Kind != wire.KindDurable:
		return answer(wire.CodeInvalidRequest, "unknown topic kind %d", m.Kind)
	case m.Partitions < 1 || m.Partitions > wire.MaxPartitions:
		return answer(wire.CodeInvalidRequest, "partitions must be 1-%d, got %d", wire.MaxPartitions, m.Partitions)
	case (m.User == "") != (m.Password == ""):
		return answer(wire.CodeInvalidRequest, "give the topic's user and its password, or neither (then GRANT gives roles on the topic)")
	case m.User == s.cfg.AdminUser:
		return answer(wire.CodeInvalidRequest, "the admin user cannot be a topic user")
	}
	if err := uniqueOptions(m.Options); err != nil {
		return err
	}
	mt := meta.Topic{Name: m.Name, Kind: m.Kind, Partitions: int(m.Partitions), User: m.User, Options: m.Options, CreatedAt: time.Now().UTC()}
	shape, err := s.parseTopicOptions(mt)
	if err != nil {
		return err
	}
	if s.cluster != nil {
		return s.createClusterTopic(m, mt, shape)
	}
	s.adminMu.Lock()
	defer s.adminMu.Unlock()
	if _, exists := (*s.topics.Load())[m.Name]; exists {
		return answer(wire.CodeTopicExists, "topic %q exists", m.Name)
	}
	if need := shape.memory(mt); s.ringMemory+need > s.cfg.MaxRingMemory {
		return answer(wire.CodeResourceLimit, "topic needs %d bytes of ring memory (%d partitions x (%d-byte ring + %d slots x %d bytes)); %d of the broker's %d are in use",
			need, mt.Partitions, shape.ringBytes, ring.Slots(shape.ringSlots), ring.SlotBytes, s.ringMemory, s.cfg.MaxRingMemory)
	}
	var newUser *meta.User // the topic's user, when CREATE_TOPIC creates it
	if acct := s.lookupUser(m.User); acct != nil {
		if !s.verifier.Check(m.User, acct.hash, m.Password) {
			return answer(wire.CodeAuthFailed, "user %q exists with another password", m.User)
		}
	} else if m.User != "" {
		hash, err := auth.Hash(m.Password, s.cfg.HashParams)
		if err != nil {
			return err
		}
		newUser = &meta.User{Name: m.User, Hash: hash}
	}
	if err := s.meta.Update(func(st *meta.State) error {
		if len(st.Topics) >= maxTopics {
			return answer(wire.CodeResourceLimit, "broker holds %d topics, the limit", maxTopics)
		}
		if newUser != nil {
			if err := s.checkUserLimits(st, 1, 1); err != nil {
				return err
			}
			st.Users[m.User] = *newUser
		} else if m.User != "" {
			if err := s.checkUserLimits(st, 0, 1); err != nil {
				return err
			}
		}
		st.Topics[m.Name] = mt
		if m.User != "" {
			st.Grant(m.User, m.Name, wire.RolesBoth)
		}
		return nil
	}); err != nil {
		return err
	}
	if mt.Kind == wire.KindDurable {
		s.offsets.create(mt.Name)
	}
	t := s.newTopic(mt, shape)
	s.ringMemory += shape.memory(mt)
	s.publishTopics(func(topics map[string]*topic) { topics[m.Name] = t })
	s.publishAccounts(s.accountState())
	return nil
}

// uniqueOptions refuses an option key given twice: which one counts would be a guess, and
// the topic keeps its options (in memory and in the metadata file), so repeats would let one
// CREATE_TOPIC store 64 times the longest value. Only new topics are checked: a topic
// persisted with repeats still loads (the last one counts).
func uniqueOptions(opts []wire.Option) error {
	for i, o := range opts {
		for _, earlier := range opts[:i] {
			if earlier.Key == o.Key {
				return answer(wire.CodeInvalidRequest, "topic option %q is given more than once", o.Key)
			}
		}
	}
	return nil
}

// maxTopics bounds the number of topics (each transient partition preallocates its ring).
const maxTopics = 10000

// publishTopics swaps in a changed copy of the topic table. Caller holds adminMu.
func (s *Server) publishTopics(change func(map[string]*topic)) {
	topics := make(map[string]*topic, len(*s.topics.Load())+1)
	for k, v := range *s.topics.Load() {
		topics[k] = v
	}
	change(topics)
	s.topics.Store(&topics)
}

// topicShape is what a topic's options make of it, checked before anything is allocated.
type topicShape struct {
	ringBytes, ringSlots int          // transient
	durable              durableShape // durable
}

// memory is the memory a topic of this shape preallocates, which CREATE_TOPIC counts against
// Config.MaxRingMemory: for a transient topic, each partition's ring arena and slot index
// (ring.Memory). A durable topic preallocates nothing its options size: its in-memory
// indexes grow with the data stored (about 24 bytes per 4 KiB, whatever segment.bytes says).
func (sh topicShape) memory(mt meta.Topic) int64 {
	if mt.Kind != wire.KindTransient {
		return 0
	}
	return ring.Memory(sh.ringBytes, sh.ringSlots) * int64(mt.Partitions)
}

// parseTopicOptions validates a topic's options against the broker's limits.
func (s *Server) parseTopicOptions(mt meta.Topic) (topicShape, error) {
	sh := topicShape{ringBytes: s.cfg.RingBytes, ringSlots: s.cfg.RingSlots}
	if mt.Kind == wire.KindDurable {
		d, err := parseDurableOptions(mt.Options, s.cfg.Limits.MaxBatch)
		sh.durable = d
		if err == nil && d.replicas > 1 && s.cluster == nil {
			err = answer(wire.CodeInvalidRequest, "%s=%d needs a cluster of at least %d brokers; this broker has no cluster settings (a cluster of one)", wire.OptionReplicationFactor, d.replicas, d.replicas)
		}
		return sh, err
	}
	for _, o := range mt.Options {
		v, err := strconv.ParseInt(o.Value, 10, 64)
		switch o.Key {
		case wire.OptionRingBytes:
			if err != nil || v < int64(2*s.cfg.Limits.MaxBatch) || v > 1<<30 {
				return sh, answer(wire.CodeInvalidRequest, "ring.bytes: %q is out of range: want an integer from %d (two max batches) to %d (1 GiB)", o.Value, 2*s.cfg.Limits.MaxBatch, 1<<30)
			}
			sh.ringBytes = int(v)
		case wire.OptionRingSlots:
			if err != nil || v < 2 || v > 1<<20 {
				return sh, answer(wire.CodeInvalidRequest, "ring.slots: %q is out of range: want an integer from 2 to %d", o.Value, 1<<20)
			}
			sh.ringSlots = int(v)
		default:
			return sh, answer(wire.CodeInvalidRequest, "unknown topic option %q (transient topics know ring.bytes and ring.slots)", o.Key)
		}
	}
	return sh, nil
}

// buildTopic makes a live topic from its metadata, applying its options.
func (s *Server) buildTopic(mt meta.Topic) (*topic, error) {
	sh, err := s.parseTopicOptions(mt)
	if err != nil {
		return nil, err
	}
	return s.newTopic(mt, sh), nil
}

// newTopic makes a live topic: preallocated rings for a transient one, opened (recovered)
// logs for a durable one. Opening logs does disk I/O: call it from a worker or at start.
func (s *Server) newTopic(mt meta.Topic, sh topicShape) *topic {
	t := newTopic(mt.Name, mt.Kind, mt.User, mt.Options, mt.Partitions, sh.ringBytes, sh.ringSlots)
	if mt.Kind == wire.KindDurable {
		for _, p := range t.parts {
			logger := s.log.With().Str("topic", mt.Name).Uint32("partition", p.id).Logger()
			p.metrics = s.metrics
			p.dl.Store(openDurable(partitionDir(s.cfg.DataDir, mt.Name, int(p.id)), sh.durable, p, s.producerOptions(mt.Name, p.id), func(format string, args ...any) {
				logger.Warn().Msgf(format, args...)
			}))
			if p.dlog().err != nil {
				logger.Error().Err(p.dlog().err).Msg("partition cannot be served; its data is left untouched for repair")
			}
		}
	}
	return t
}

func (c *conn) handleDeleteTopic(corr uint32, body []byte) {
	var m wire.TopicName
	if !c.decodeOr(corr, wire.OpDeleteTopic, m.Decode(body)) {
		return
	}
	s, log := c.srv, c.log
	c.runBackground(corr, wire.OpDeleteTopic, func() (func(*conn), time.Duration) {
		err := s.deleteTopic(m.Name) // made even if the connection closes meanwhile
		if err == nil {
			log.Info().Str("topic", m.Name).Msg("topic deleted")
		}
		return func(c *conn) {
			c.reply(corr, err, func() { c.respondEmpty(wire.OpDeleteTopic, corr) })
		}, 0
	})
}

// deleteTopic removes a topic and every grant on it; its users stay. Runs on a worker.
func (s *Server) deleteTopic(name string) error {
	if t := (*s.topics.Load())[name]; t != nil && t.cluster != nil {
		return s.deleteClusterTopic(name)
	}
	s.adminMu.Lock()
	defer s.adminMu.Unlock()
	t := (*s.topics.Load())[name]
	if t == nil {
		return answer(wire.CodeUnknownTopic, "no topic %q", name)
	}
	if err := s.meta.Update(func(st *meta.State) error {
		st.RemoveTopic(name)
		return nil
	}); err != nil {
		return err
	}
	t.deleted.Store(true)
	s.ringMemory -= t.ringMemory()
	s.publishTopics(func(topics map[string]*topic) { delete(topics, name) })
	s.publishAccounts(s.accountState())
	for _, p := range t.parts {
		p.wakeAll() // subscribers and waiting fetches learn the topic is gone
	}
	if t.kind == wire.KindDurable {
		s.groups.DropTopic(name)
		s.offsets.drop(name)
		if err := t.closeLogs(); err != nil {
			s.log.Warn().Err(err).Str("topic", name).Msg("closing the logs of a deleted topic")
		}
		dir := filepath.Join(s.cfg.DataDir, "topics", name)
		if err := os.RemoveAll(dir); err != nil {
			s.log.Error().Err(err).Str("dir", dir).Msg("could not remove the data of a deleted topic")
		}
	}
	return nil
}
