package broker

import (
	"fmt"

	"github.com/lightq/lightq/wire"
)

// handle dispatches one frame. Runs on the connection's loop; body is valid only until the
// frame is discarded, so handlers copy what they keep.
func (c *conn) handle(h wire.Header, body []byte) {
	if h.Flags&wire.FlagResponse != 0 {
		// A header a client may not send, like an unknown flag bit: a framing error, which
		// answers no request (corr id 0, PROTOCOL.md section 2) and closes the connection.
		c.sendError(0, wire.CodeMalformedFrame, fmt.Sprintf("%s frame with corr id %d has FlagResponse set: clients must not send responses", h.Op, h.Corr))
		return
	}
	switch h.Op {
	case wire.OpHello:
		c.handleHello(h.Corr, body)
		return
	case wire.OpPing:
		if c.decodeOr(h.Corr, wire.OpPing, wire.NoBody(body)) {
			c.respondEmpty(wire.OpPing, h.Corr)
		}
		return
	case wire.OpAuth:
		if !c.handleCertAuth(h.Corr, body) {
			c.handleAuth(h.Corr, body)
		}
		return
	}
	// Who may do what is opNeeds (authz.go); the topic requests apply it in lookupTopic.
	n := opNeeds[h.Op]
	if n == needUnset || n == needNothing {
		c.sendError(h.Corr, wire.CodeUnknownOpcode, fmt.Sprintf("opcode 0x%02x is not a request", uint8(h.Op)))
		return
	}
	if !c.helloDone {
		c.sendError(h.Corr, wire.CodeHandshakeRequired, "send HELLO first")
		return
	}
	if c.principal == nil {
		c.sendError(h.Corr, wire.CodeNotAuthenticated, h.Op.String()+" needs a successful AUTH")
		return
	}
	if n == needAdmin && !c.authorize(nil, needAdmin) {
		c.refuseAdmin(h.Corr, h.Op)
		return
	}
	switch h.Op {
	case wire.OpProduce:
		c.handleProduce(h.Corr, body)
	case wire.OpInitProducer:
		c.handleInitProducer(h.Corr, body)
	case wire.OpSubscribe:
		c.handleSubscribe(h.Corr, body)
	case wire.OpCredit:
		c.handleCredit(h.Corr, body)
	case wire.OpUnsubscribe:
		c.handleUnsubscribe(h.Corr, body)
	case wire.OpCreateTopic:
		c.handleCreateTopic(h.Corr, body)
	case wire.OpDeleteTopic:
		c.handleDeleteTopic(h.Corr, body)
	case wire.OpMetadata:
		c.handleMetadata(h.Corr, body)
	case wire.OpStats:
		c.handleStats(h.Corr, body)
	case wire.OpFetch:
		c.handleFetch(h.Corr, body)
	case wire.OpListOffsets:
		c.handleListOffsets(h.Corr, body)
	case wire.OpCommitOffset:
		c.handleCommitOffset(h.Corr, body)
	case wire.OpFetchCommitted:
		c.handleFetchCommitted(h.Corr, body)
	case wire.OpCreateUser:
		c.handleCreateUser(h.Corr, body)
	case wire.OpDeleteUser:
		c.handleDeleteUser(h.Corr, body)
	case wire.OpSetPassword:
		c.handleSetPassword(h.Corr, body)
	case wire.OpGrant, wire.OpRevoke:
		c.handleGrant(h.Op, h.Corr, body)
	case wire.OpListUsers:
		c.handleListUsers(h.Corr, body)
	case wire.OpJoinGroup:
		c.handleJoinGroup(h.Corr, body)
	case wire.OpHeartbeat:
		c.handleHeartbeat(h.Corr, body)
	case wire.OpLeaveGroup:
		c.handleLeaveGroup(h.Corr, body)
	case wire.OpGroupCommit:
		c.handleGroupCommit(h.Corr, body)
	case wire.OpListGroups:
		c.handleListGroups(h.Corr, body)
	case wire.OpDescribeGroup:
		c.handleDescribeGroup(h.Corr, body)
	case wire.OpAddBroker:
		c.handleAddBroker(h.Corr, body)
	case wire.OpMoveReplicas:
		c.handleMoveReplicas(h.Corr, body)
	case wire.OpDrainBroker:
		c.handleDrainBroker(h.Corr, body)
	case wire.OpRemoveBroker:
		c.handleRemoveBroker(h.Corr, body)
	case wire.OpMembership:
		c.handleMembership(h.Corr, body)
	case wire.OpClusterStatus:
		c.handleClusterStatus(h.Corr, body)
	case wire.OpFindCoordinator:
		c.handleFindCoordinator(h.Corr, body)
	default:
		c.sendError(h.Corr, wire.CodeUnknownOpcode, h.Op.String()+" is not handled")
	}
}

// decodeOr decodes a body and answers INVALID_REQUEST when it does not parse. The frame was
// well delimited, so the connection stays usable.
func (c *conn) decodeOr(corr uint32, op wire.Op, err error) bool {
	if err != nil {
		c.sendError(corr, wire.CodeInvalidRequest, op.String()+": "+err.Error())
		return false
	}
	return true
}

func (c *conn) handleHello(corr uint32, body []byte) {
	var m wire.Hello
	if !c.decodeOr(corr, wire.OpHello, m.Decode(body)) {
		return
	}
	c.helloDone = true
	c.log = c.log.With().Str("client", m.ClientName).Logger()
	resp := wire.HelloResponse{ProtocolVersion: wire.Version, BrokerVersion: Version, Limits: c.srv.cfg.Limits}
	c.respond(wire.OpHello, corr, resp.AppendTo)
}

func (c *conn) handleMetadata(corr uint32, body []byte) {
	var m wire.MetadataRequest
	if !c.decodeOr(corr, wire.OpMetadata, m.Decode(body)) {
		return
	}
	resp := wire.MetadataResponse{Cluster: m.Cluster}
	topics := *c.srv.topics.Load()
	if len(m.Topics) == 0 {
		for _, t := range sortedTopics(topics) {
			if c.may(wire.OpMetadata, t) {
				resp.Topics = append(resp.Topics, t.metadata())
			}
		}
	} else {
		for _, name := range m.Topics {
			t := c.lookupTopic(corr, wire.OpMetadata, []byte(name))
			if t == nil {
				return
			}
			resp.Topics = append(resp.Topics, t.metadata())
		}
	}
	switch {
	case m.Cluster && c.srv.cluster != nil:
		c.srv.describeClusterLayout(&resp)
	case m.Cluster:
		c.srv.describeCluster(&resp)
	}
	c.respond(wire.OpMetadata, corr, resp.AppendTo)
}

// describeCluster fills METADATA's cluster layout. A broker without cluster settings is a
// cluster of one: it leads every partition, and its address is the one the client used.
func (s *Server) describeCluster(resp *wire.MetadataResponse) {
	id := s.nodeID()
	resp.NodeID = id
	resp.Brokers = []wire.BrokerMetadata{{NodeID: id}}
	self := []uint32{id}
	for i := range resp.Topics {
		for j := range resp.Topics[i].Partitions {
			p := &resp.Topics[i].Partitions[j]
			p.Leader, p.Replicas = id, self
		}
	}
}

// nodeID is this broker's node id (Config.NodeID, 1 when unset).
func (s *Server) nodeID() uint32 { return s.cfg.nodeID() }

func (c *conn) handleStats(corr uint32, body []byte) {
	var m wire.TopicName
	if !c.decodeOr(corr, wire.OpStats, m.Decode(body)) {
		return
	}
	var resp wire.StatsResponse
	if m.Name == "" {
		for _, t := range sortedTopics(*c.srv.topics.Load()) {
			if c.may(wire.OpStats, t) {
				resp.Topics = append(resp.Topics, wire.TopicStats{Name: t.name, Counters: t.counters()})
			}
		}
	} else {
		t := c.lookupTopic(corr, wire.OpStats, []byte(m.Name))
		if t == nil {
			return
		}
		resp.Topics = append(resp.Topics, wire.TopicStats{Name: t.name, Counters: t.counters()})
	}
	c.respond(wire.OpStats, corr, resp.AppendTo)
}
