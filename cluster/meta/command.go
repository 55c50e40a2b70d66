package meta

import (
	"errors"
	"fmt"

	"github.com/lightq/lightq/wire"
)

// Command is one change of the metadata: one of the types below. A command is proposed
// (Store.Propose), stored as one Raft entry, and applied by every member in log order; apply
// checks it again against the state of that moment (apply.go), so a command that was valid
// when proposed but no longer is (a topic created twice concurrently) is refused the same
// way everywhere and changes nothing.
type Command interface {
	op() op
	appendBody(dst []byte) []byte
	decodeBody(r *wire.Reader)
	// check is the command's validity on its own (names, sizes, lists), wrapping ErrInvalid.
	check() error
	// apply checks the command against the state being made and changes it, or refuses it
	// (the error) and changes nothing.
	apply(e *editor) (Result, error)
}

// op is a command's type on the wire. NEVER renumber one: the log holds them. A new command
// gets a new op; a broker must not propose it before every member of the cluster knows it (a
// member that meets an op it does not know stops applying: see Store.Err).
type op uint8

const (
	opAddBroker      op = 1
	opDrainBroker    op = 2
	opRemoveBroker   op = 3
	opCreateTopic    op = 4
	opDeleteTopic    op = 5
	opSetReplicas    op = 6
	opCreateUser     op = 7
	opDeleteUser     op = 8
	opSetPassword    op = 9
	opGrant          op = 10
	opRevoke         op = 11
	opSetCoordinator op = 12
	opFinishMove     op = 13
)

func newCommand(o op) Command {
	switch o {
	case opAddBroker:
		return new(AddBroker)
	case opDrainBroker:
		return new(DrainBroker)
	case opRemoveBroker:
		return new(RemoveBroker)
	case opCreateTopic:
		return new(CreateTopic)
	case opDeleteTopic:
		return new(DeleteTopic)
	case opSetReplicas:
		return new(SetReplicas)
	case opCreateUser:
		return new(CreateUser)
	case opDeleteUser:
		return new(DeleteUser)
	case opSetPassword:
		return new(SetPassword)
	case opGrant:
		return new(Grant)
	case opRevoke:
		return new(Revoke)
	case opSetCoordinator:
		return new(SetCoordinator)
	case opFinishMove:
		return new(FinishMove)
	}
	return nil
}

// Limits of the encodings (commands and snapshots).
const (
	MaxAddr     = 255     // bytes of a broker address
	MaxHash     = 1024    // bytes of a password hash
	MaxReplicas = 9       // replicas of one partition
	MaxCommand  = 1 << 20 // bytes of one encoded command (the log's largest batch)
)

// Command encoding (big-endian; strings are u16 length + bytes, byte strings u32 length +
// bytes, lists a count then the items):
//
//	0 version u8 = 1 | 1 request id [16] | 17 op u8 | 18 body, to the end
//
//	AddBroker      id u64 | client addr str | tls addr str | cluster addr str
//	DrainBroker    id u64
//	RemoveBroker   id u64
//	CreateTopic    name str | kind u8 | user str | user hash bytes | created unix ms i64 |
//	               options u8 × (key str | value str) | partitions u16 × (replicas u8 × id u64)
//	DeleteTopic    name str
//	SetReplicas    topic str | partition u32 | from u8 × id u64 | to u8 × id u64
//	CreateUser     name str | hash bytes
//	DeleteUser     name str
//	SetPassword    name str | hash bytes
//	Grant, Revoke  user str | topic str | roles u8
//	SetCoordinator group str | node u64
//	FinishMove     topic str | partition u32 | group u64 | replicas u8 × id u64
//
// The request id is the proposer's (random), by which it recognises its command when it
// applies it. Every value has one encoding (decode then encode gives the same bytes). NEVER
// CHANGE version 1: logs and peers hold it; a new layout is a new version.
const commandVersion = 1

// ErrMalformed wraps every refusal of bytes that are no command or no snapshot.
var ErrMalformed = errors.New("meta: malformed")

// AppendCommand appends the encoding of cmd with request id id to dst.
func AppendCommand(dst []byte, id [16]byte, cmd Command) []byte {
	dst = append(dst, commandVersion)
	dst = append(dst, id[:]...)
	dst = append(dst, byte(cmd.op()))
	return cmd.appendBody(dst)
}

// DecodeCommand decodes one command (the whole of b). It checks the encoding only (lengths,
// limits, the version and op); whether the command makes sense is apply's to say. Strings are
// copied; nothing returned aliases b.
func DecodeCommand(b []byte) ([16]byte, Command, error) {
	var id [16]byte
	if len(b) > MaxCommand {
		return id, nil, fmt.Errorf("%w command: %d bytes, limit %d", ErrMalformed, len(b), MaxCommand)
	}
	r := wire.NewReader(b)
	if v := r.U8(); r.Err() == nil && v != commandVersion {
		return id, nil, fmt.Errorf("%w command: version %d, this broker reads %d (written by a newer broker?)", ErrMalformed, v, commandVersion)
	}
	copy(id[:], r.Raw(16, "request id"))
	o := op(r.U8())
	if r.Err() != nil {
		return id, nil, fmt.Errorf("%w command: %w", ErrMalformed, r.Err())
	}
	cmd := newCommand(o)
	if cmd == nil {
		return id, nil, fmt.Errorf("%w command: op %d unknown to this broker (written by a newer broker?)", ErrMalformed, o)
	}
	cmd.decodeBody(&r)
	if err := r.Done(fmt.Sprintf("%T", cmd)); err != nil {
		return id, nil, fmt.Errorf("%w command: %w", ErrMalformed, err)
	}
	return id, cmd, nil
}

// AddBroker adds a broker to the cluster, or changes the addresses of one it has (a broker
// announces itself at every start). A new broker is active; a known one keeps its state.
type AddBroker struct {
	ID                               uint64
	ClientAddr, TLSAddr, ClusterAddr string
}

// DrainBroker marks a broker removing: Place chooses it no more. Its partitions are then
// moved (SetReplicas) before RemoveBroker.
type DrainBroker struct{ ID uint64 }

// RemoveBroker removes a broker that holds no replica (refused with ErrBrokerInUse while it
// does) and coordinates no consumer group.
type RemoveBroker struct{ ID uint64 }

// CreateTopic creates a topic whose partitions are placed as Placement says (one replica list
// per partition, the preferred leader first: Place computes it on the proposer, so apply
// needs no choice of its own); apply gives the partitions the next group ids. User, when not
// empty, is the topic's user and gets both roles on it: created with UserHash when UserHash is
// set (refused with ErrUserExists if the user exists by then), else it must exist.
type CreateTopic struct {
	Name      string
	Kind      wire.Kind
	User      string
	UserHash  []byte
	CreatedAt int64 // unix milliseconds, the proposer's clock
	Options   []wire.Option
	Placement [][]uint64
}

// DeleteTopic deletes a topic and every grant on it.
type DeleteTopic struct{ Name string }

// SetReplicas changes the replicas of one partition (moving it), if they are still From
// (ErrConflict otherwise: another change came first). Brokers added must be active. The move
// is under way until FinishMove (see Partition).
type SetReplicas struct {
	Topic     string
	Partition int
	From, To  []uint64
}

// CreateUser creates a user without roles.
type CreateUser struct {
	Name string
	Hash []byte
}

// DeleteUser deletes a user with its grants, and clears it as the user of its topics.
type DeleteUser struct{ Name string }

// SetPassword changes a user's password hash.
type SetPassword struct {
	Name string
	Hash []byte
}

// Grant adds roles to a user: wire.RolesAdmin on the cluster (empty Topic), or
// produce/consume on a topic.
type Grant struct {
	User, Topic string
	Roles       wire.Roles
}

// Revoke removes roles from a user, as Grant names them; a topic grant left with none goes.
type Revoke struct {
	User, Topic string
	Roles       wire.Roles
}

// SetCoordinator makes node the coordinator of consumer group Group (Node 0: none).
type SetCoordinator struct {
	Group string
	Node  uint64
}

func (*AddBroker) op() op      { return opAddBroker }
func (*DrainBroker) op() op    { return opDrainBroker }
func (*RemoveBroker) op() op   { return opRemoveBroker }
func (*CreateTopic) op() op    { return opCreateTopic }
func (*DeleteTopic) op() op    { return opDeleteTopic }
func (*SetReplicas) op() op    { return opSetReplicas }
func (*CreateUser) op() op     { return opCreateUser }
func (*DeleteUser) op() op     { return opDeleteUser }
func (*SetPassword) op() op    { return opSetPassword }
func (*Grant) op() op          { return opGrant }
func (*Revoke) op() op         { return opRevoke }
func (*SetCoordinator) op() op { return opSetCoordinator }
func (*FinishMove) op() op     { return opFinishMove }

func (c *AddBroker) appendBody(dst []byte) []byte {
	dst = wire.AppendU64(dst, c.ID)
	dst = appendStr(dst, c.ClientAddr)
	dst = appendStr(dst, c.TLSAddr)
	return appendStr(dst, c.ClusterAddr)
}

func (c *AddBroker) decodeBody(r *wire.Reader) {
	c.ID = r.U64()
	c.ClientAddr = r.String(MaxAddr, "client address")
	c.TLSAddr = r.String(MaxAddr, "TLS address")
	c.ClusterAddr = r.String(MaxAddr, "cluster address")
}

func (c *DrainBroker) appendBody(dst []byte) []byte  { return wire.AppendU64(dst, c.ID) }
func (c *DrainBroker) decodeBody(r *wire.Reader)     { c.ID = r.U64() }
func (c *RemoveBroker) appendBody(dst []byte) []byte { return wire.AppendU64(dst, c.ID) }
func (c *RemoveBroker) decodeBody(r *wire.Reader)    { c.ID = r.U64() }

func (c *CreateTopic) appendBody(dst []byte) []byte {
	dst = appendStr(dst, c.Name)
	dst = append(dst, byte(c.Kind))
	dst = appendStr(dst, c.User)
	dst = wire.AppendBytes(dst, c.UserHash)
	dst = wire.AppendI64(dst, c.CreatedAt)
	dst = appendOptions(dst, c.Options)
	dst = wire.AppendU16(dst, uint16(min(len(c.Placement), 0xffff))) // check() bounds it
	for _, p := range c.Placement {
		dst = appendIDs(dst, p)
	}
	return dst
}

func (c *CreateTopic) decodeBody(r *wire.Reader) {
	c.Name = r.String(wire.MaxTopicName, "topic name")
	c.Kind = wire.Kind(r.U8())
	c.User = r.String(wire.MaxUser, "user name")
	c.UserHash = cloneBytes(r.Bytes(MaxHash, "password hash"))
	c.CreatedAt = r.I64()
	c.Options = readOptions(r)
	n := int(r.U16())
	if n > wire.MaxPartitions {
		r.Fail(fmt.Errorf("%d partitions, limit %d", n, wire.MaxPartitions))
		return
	}
	if r.Err() == nil && n > r.Len() { // every partition takes at least its count byte
		r.Fail(fmt.Errorf("%d partitions in %d bytes", n, r.Len()))
		return
	}
	if n > 0 {
		c.Placement = make([][]uint64, n)
	}
	for i := range c.Placement {
		c.Placement[i] = readIDs(r)
	}
}

func (c *DeleteTopic) appendBody(dst []byte) []byte { return appendStr(dst, c.Name) }
func (c *DeleteTopic) decodeBody(r *wire.Reader)    { c.Name = r.String(wire.MaxTopicName, "topic name") }

func (c *SetReplicas) appendBody(dst []byte) []byte {
	dst = appendStr(dst, c.Topic)
	dst = wire.AppendU32(dst, uint32(c.Partition))
	dst = appendIDs(dst, c.From)
	return appendIDs(dst, c.To)
}

func (c *SetReplicas) decodeBody(r *wire.Reader) {
	c.Topic = r.String(wire.MaxTopicName, "topic name")
	c.Partition = int(r.U32())
	c.From = readIDs(r)
	c.To = readIDs(r)
}

func (c *CreateUser) appendBody(dst []byte) []byte {
	return wire.AppendBytes(appendStr(dst, c.Name), c.Hash)
}

func (c *CreateUser) decodeBody(r *wire.Reader) {
	c.Name = r.String(wire.MaxUser, "user name")
	c.Hash = cloneBytes(r.Bytes(MaxHash, "password hash"))
}

func (c *DeleteUser) appendBody(dst []byte) []byte { return appendStr(dst, c.Name) }
func (c *DeleteUser) decodeBody(r *wire.Reader)    { c.Name = r.String(wire.MaxUser, "user name") }

func (c *SetPassword) appendBody(dst []byte) []byte {
	return wire.AppendBytes(appendStr(dst, c.Name), c.Hash)
}

func (c *SetPassword) decodeBody(r *wire.Reader) {
	c.Name = r.String(wire.MaxUser, "user name")
	c.Hash = cloneBytes(r.Bytes(MaxHash, "password hash"))
}

func (c *Grant) appendBody(dst []byte) []byte  { return appendRoles(dst, c.User, c.Topic, c.Roles) }
func (c *Grant) decodeBody(r *wire.Reader)     { c.User, c.Topic, c.Roles = readRoles(r) }
func (c *Revoke) appendBody(dst []byte) []byte { return appendRoles(dst, c.User, c.Topic, c.Roles) }
func (c *Revoke) decodeBody(r *wire.Reader)    { c.User, c.Topic, c.Roles = readRoles(r) }

func (c *SetCoordinator) appendBody(dst []byte) []byte {
	return wire.AppendU64(appendStr(dst, c.Group), c.Node)
}

func (c *SetCoordinator) decodeBody(r *wire.Reader) {
	c.Group = r.String(wire.MaxGroupName, "group name")
	c.Node = r.U64()
}

// appendStr appends a string field; check() keeps every one within its limit (all are far
// below the u16 length), so a longer one is cut rather than panic: it cannot be proposed.
func appendStr(dst []byte, s string) []byte {
	if len(s) > 0xffff {
		s = s[:0xffff]
	}
	return wire.AppendString(dst, s)
}

func appendRoles(dst []byte, user, topic string, roles wire.Roles) []byte {
	return append(appendStr(appendStr(dst, user), topic), byte(roles))
}

func readRoles(r *wire.Reader) (string, string, wire.Roles) {
	user := r.String(wire.MaxUser, "user name")
	topic := r.String(wire.MaxTopicName, "topic name")
	return user, topic, wire.Roles(r.U8())
}

func appendOptions(dst []byte, opts []wire.Option) []byte {
	dst = append(dst, byte(min(len(opts), 0xff))) // check() bounds it
	for _, o := range opts[:min(len(opts), 0xff)] {
		dst = appendStr(appendStr(dst, o.Key), o.Value)
	}
	return dst
}

func readOptions(r *wire.Reader) []wire.Option {
	n := int(r.U8())
	if r.Err() != nil || n == 0 {
		return nil
	}
	if n > wire.MaxOptions {
		r.Fail(fmt.Errorf("%d options, limit %d", n, wire.MaxOptions))
		return nil
	}
	opts := make([]wire.Option, n)
	for i := range opts {
		opts[i].Key = r.String(wire.MaxOptionKey, "option key")
		opts[i].Value = r.String(wire.MaxOptionValue, "option value")
	}
	return opts
}

func appendIDs(dst []byte, ids []uint64) []byte {
	dst = append(dst, byte(min(len(ids), 0xff))) // check() bounds it
	for _, id := range ids[:min(len(ids), 0xff)] {
		dst = wire.AppendU64(dst, id)
	}
	return dst
}

func readIDs(r *wire.Reader) []uint64 {
	n := int(r.U8())
	if r.Err() != nil || n == 0 {
		return nil
	}
	if n > MaxReplicas {
		r.Fail(fmt.Errorf("%d replicas, limit %d", n, MaxReplicas))
		return nil
	}
	ids := make([]uint64, n)
	for i := range ids {
		ids[i] = r.U64()
	}
	return ids
}

func cloneBytes(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
}
