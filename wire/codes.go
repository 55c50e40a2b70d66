package wire

import (
	"errors"
	"fmt"
	"slices"
)

// Sentinel errors of the decoders. Errors returned by this package wrap one of them with %w and
// say where the problem was.
var (
	ErrMalformed     = errors.New("malformed frame")
	ErrNotProtocol   = errors.New("not a LightQ peer")
	ErrVersion       = errors.New("unsupported protocol version")
	ErrFrameTooLarge = errors.New("frame too large")
	ErrCorruptBatch  = errors.New("corrupt record batch")
	ErrBatchTooLarge = errors.New("record batch too large")
	// ErrMessageTooLarge: one record's key, value and headers exceed MaxMessage.
	ErrMessageTooLarge = errors.New("message too large")

	// The refusals of idempotent produce (PROTOCOL.md section 15): CodeOf maps them to
	// OUT_OF_ORDER_SEQUENCE, PRODUCER_FENCED and UNKNOWN_PRODUCER.
	ErrOutOfOrderSequence = errors.New("out of order sequence")
	ErrProducerFenced     = errors.New("producer fenced")
	ErrUnknownProducer    = errors.New("unknown producer")
)

// Code is an error code carried by an ERROR frame. NEVER renumber: codes are part of the wire
// format. Each code states whether the broker closes the connection after sending it.
type Code uint16

const (
	CodeMalformedFrame      Code = 1  // the byte stream cannot be parsed; fatal
	CodeUnsupportedVersion  Code = 2  // header version is not one the broker speaks; fatal
	CodeFrameTooLarge       Code = 3  // length over the broker's limit; fatal
	CodeUnknownOpcode       Code = 4  // the frame was skipped
	CodeHandshakeRequired   Code = 5  // HELLO must come first
	CodeNotAuthenticated    Code = 6  // only HELLO, AUTH and PING are allowed before AUTH
	CodeAuthFailed          Code = 7  // wrong user or password
	CodeAuthTimeout         Code = 8  // no successful AUTH within the deadline; fatal
	CodeTooManyAttempts     Code = 9  // too many failed logins; fatal
	CodeNotAuthorized       Code = 10 // authenticated, but not allowed to do this
	CodeUnknownTopic        Code = 11
	CodeUnknownPartition    Code = 12
	CodeTopicExists         Code = 13
	CodeInvalidRequest      Code = 14 // a well-framed request whose body or values are invalid
	CodeCorruptBatch        Code = 15 // record batch CRC or structure is wrong; nothing stored
	CodeMessageTooLarge     Code = 16 // a batch or record over the announced limits
	CodeStorageFull         Code = 17 // the disk is full; retry later
	CodeStorageError        Code = 18 // I/O error on the partition; it refuses writes until repaired
	CodeNotSupported        Code = 19 // e.g. FETCH on a transient topic
	CodeShuttingDown        Code = 20 // the broker is stopping; fatal
	CodeInternal            Code = 21
	CodeOffsetOutOfRange    Code = 22
	CodeUnknownSubscription Code = 23
	CodeResourceLimit       Code = 24 // too many subscriptions or topics
	CodeNotProtocol         Code = 25 // the peer does not speak LightQ (HTTP, TLS, ...); fatal
	CodeTooMuchInput        Code = 26 // input piled up while a request held the connection; fatal
	CodeTimeout             Code = 27 // a frame not completed in time, or an idle connection; fatal
	CodeTooManyConnections  Code = 28 // the broker's or the client address's connection cap; fatal
	CodeUserExists          Code = 29 // CREATE_USER of an existing name
	CodeUnknownUser         Code = 30 // no such user (DELETE_USER, SET_PASSWORD, GRANT, REVOKE)
	CodeOutOfOrderSequence  Code = 31 // an idempotent batch's base sequence is not the next expected; nothing stored
	CodeProducerFenced      Code = 32 // a newer epoch of the producer id has written the partition; nothing stored
	CodeUnknownProducer     Code = 33 // the broker holds no state of the producer id (new, expired, lost); nothing stored
	// Consumer groups (PROTOCOL.md section 10.1).
	CodeUnknownMember Code = 34 // the member id is not in the group (never joined, left, or expired): join again
	CodeFencedMember  Code = 35 // the member does not hold the partition in that generation: stop it, do not commit
	CodeGroupNotEmpty Code = 36 // an offset-only commit (or reset) of a group that has live members
	// Replication (PROTOCOL.md section 16).
	CodeNotLeader          Code = 41 // this broker does not lead the partition: refresh METADATA (cluster flag) and go to the leader; nothing done
	CodeReplicationTimeout Code = 42 // the leader did not hear a quorum in time: the batch may or may not be stored
	// Cluster membership (PROTOCOL.md section 16.2).
	CodeUnknownBroker   Code = 43 // no broker of that node id in the cluster
	CodeBrokerInUse     Code = 44 // the broker holds replicas (drain it first), or is being removed and takes none
	CodeReplicasChanged Code = 45 // the partition's replicas changed meanwhile (another move came first); nothing done
	// Consumer groups in a cluster (PROTOCOL.md sections 10.1 and 16).
	CodeNotCoordinator Code = 46 // this broker does not coordinate the group (or is loading it): FIND_COORDINATOR and go there; nothing done
)

type codeInfo struct {
	name  string
	fatal bool
}

var codeTable = map[Code]codeInfo{
	CodeMalformedFrame:      {"MALFORMED_FRAME", true},
	CodeUnsupportedVersion:  {"UNSUPPORTED_VERSION", true},
	CodeFrameTooLarge:       {"FRAME_TOO_LARGE", true},
	CodeUnknownOpcode:       {"UNKNOWN_OPCODE", false},
	CodeHandshakeRequired:   {"HANDSHAKE_REQUIRED", false},
	CodeNotAuthenticated:    {"NOT_AUTHENTICATED", false},
	CodeAuthFailed:          {"AUTH_FAILED", false},
	CodeAuthTimeout:         {"AUTH_TIMEOUT", true},
	CodeTooManyAttempts:     {"TOO_MANY_ATTEMPTS", true},
	CodeNotAuthorized:       {"NOT_AUTHORIZED", false},
	CodeUnknownTopic:        {"UNKNOWN_TOPIC", false},
	CodeUnknownPartition:    {"UNKNOWN_PARTITION", false},
	CodeTopicExists:         {"TOPIC_EXISTS", false},
	CodeInvalidRequest:      {"INVALID_REQUEST", false},
	CodeCorruptBatch:        {"CORRUPT_BATCH", false},
	CodeMessageTooLarge:     {"MESSAGE_TOO_LARGE", false},
	CodeStorageFull:         {"STORAGE_FULL", false},
	CodeStorageError:        {"STORAGE_ERROR", false},
	CodeNotSupported:        {"NOT_SUPPORTED", false},
	CodeShuttingDown:        {"SHUTTING_DOWN", true},
	CodeInternal:            {"INTERNAL", false},
	CodeOffsetOutOfRange:    {"OFFSET_OUT_OF_RANGE", false},
	CodeUnknownSubscription: {"UNKNOWN_SUBSCRIPTION", false},
	CodeResourceLimit:       {"RESOURCE_LIMIT", false},
	CodeNotProtocol:         {"NOT_PROTOCOL", true},
	CodeTooMuchInput:        {"TOO_MUCH_INPUT", true},
	CodeTimeout:             {"TIMEOUT", true},
	CodeTooManyConnections:  {"TOO_MANY_CONNECTIONS", true},
	CodeUserExists:          {"USER_EXISTS", false},
	CodeUnknownUser:         {"UNKNOWN_USER", false},
	CodeOutOfOrderSequence:  {"OUT_OF_ORDER_SEQUENCE", false},
	CodeProducerFenced:      {"PRODUCER_FENCED", false},
	CodeUnknownProducer:     {"UNKNOWN_PRODUCER", false},
	CodeUnknownMember:       {"UNKNOWN_MEMBER", false},
	CodeFencedMember:        {"FENCED_MEMBER", false},
	CodeGroupNotEmpty:       {"GROUP_NOT_EMPTY", false},
	CodeNotLeader:           {"NOT_LEADER", false},
	CodeReplicationTimeout:  {"REPLICATION_TIMEOUT", false},
	CodeUnknownBroker:       {"UNKNOWN_BROKER", false},
	CodeBrokerInUse:         {"BROKER_IN_USE", false},
	CodeReplicasChanged:     {"REPLICAS_CHANGED", false},
	CodeNotCoordinator:      {"NOT_COORDINATOR", false},
}

func (c Code) String() string {
	if i, ok := codeTable[c]; ok {
		return i.name
	}
	return fmt.Sprintf("CODE_%d", uint16(c))
}

// Fatal reports whether the broker closes the connection after an ERROR with this code.
func (c Code) Fatal() bool { return codeTable[c].fatal }

// Codes lists every defined code in numeric order (for documentation tests). Codes are
// allocated in ranges, so the list may have gaps.
func Codes() []Code {
	out := make([]Code, 0, len(codeTable))
	for c := range codeTable {
		out = append(out, c)
	}
	slices.Sort(out)
	return out
}

// Error is an error reported by the broker in an ERROR frame. Clients return it as is, so
// callers can test the code with errors.As or Is.
type Error struct {
	Code    Code
	Message string
}

func (e *Error) Error() string {
	if e.Message == "" {
		return "lightq: " + e.Code.String()
	}
	return "lightq: " + e.Code.String() + ": " + e.Message
}

// Is makes errors.Is(err, &wire.Error{Code: c}) match on the code alone.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// CodeOf maps a stream-level decoder error (FrameSize, ParseFrame, ParseBatch) to the code the
// broker answers it with. A body that fails to decode inside a well-delimited frame is
// INVALID_REQUEST, not the MALFORMED_FRAME this returns for ErrMalformed: callers decide.
func CodeOf(err error) Code {
	var we *Error
	switch {
	case errors.As(err, &we):
		return we.Code
	case errors.Is(err, ErrNotProtocol):
		return CodeNotProtocol
	case errors.Is(err, ErrVersion):
		return CodeUnsupportedVersion
	case errors.Is(err, ErrFrameTooLarge):
		return CodeFrameTooLarge
	case errors.Is(err, ErrCorruptBatch):
		return CodeCorruptBatch
	case errors.Is(err, ErrBatchTooLarge), errors.Is(err, ErrMessageTooLarge):
		return CodeMessageTooLarge
	case errors.Is(err, ErrMalformed):
		return CodeMalformedFrame
	case errors.Is(err, ErrOutOfOrderSequence):
		return CodeOutOfOrderSequence
	case errors.Is(err, ErrProducerFenced):
		return CodeProducerFenced
	case errors.Is(err, ErrUnknownProducer):
		return CodeUnknownProducer
	}
	return CodeInternal
}
