package wire

// Bodies of FIND_COORDINATOR (op 0x4A): in a cluster, each consumer group has one broker,
// its coordinator, that answers its requests (JOIN_GROUP ... DESCRIBE_GROUP, COMMIT_OFFSET,
// FETCH_COMMITTED); another broker answers them NOT_COORDINATOR. FIND_COORDINATOR, which any
// broker answers, names it. PROTOCOL.md sections 10.1 and 16 have the rules.

// FindCoordinator is the body of FIND_COORDINATOR: which broker coordinates Group.
type FindCoordinator struct {
	Group string
}

func (m *FindCoordinator) AppendTo(dst []byte) []byte { return AppendString(dst, m.Group) }

func (m *FindCoordinator) Decode(b []byte) error {
	r := NewReader(b)
	m.Group = r.String(MaxGroupName, "group")
	checkName(&r, ValidGroupName(m.Group))
	return r.Done("FIND_COORDINATOR")
}

// FindCoordinatorResponse answers FIND_COORDINATOR. Node is the answering broker's node id
// and Coordinator the coordinator's (equal: this broker is the coordinator; 0: none is known
// now, an election or the cluster's start is under way, so ask again in a moment). Addr and
// TLSAddr are where clients reach the coordinator (as METADATA's broker list gives them;
// empty when not known, and Addr empty on a broker without cluster settings, which
// coordinates every group itself: the address the client used).
type FindCoordinatorResponse struct {
	Node        uint32
	Coordinator uint32
	Addr        string
	TLSAddr     string
}

func (m *FindCoordinatorResponse) AppendTo(dst []byte) []byte {
	dst = AppendU32(dst, m.Node)
	dst = AppendU32(dst, m.Coordinator)
	dst = AppendString(dst, m.Addr)
	return AppendString(dst, m.TLSAddr)
}

func (m *FindCoordinatorResponse) Decode(b []byte) error {
	r := NewReader(b)
	m.Node = r.U32()
	m.Coordinator = r.U32()
	m.Addr = r.String(MaxAddr, "coordinator address")
	m.TLSAddr = r.String(MaxAddr, "coordinator TLS address")
	return r.Done("FIND_COORDINATOR response")
}
