package client

import (
	"errors"

	"github.com/lightq/lightq/wire"
)

// What a failed message means: every error a producer callback or Flush gets for a message
// that was taken by Send is a *ProduceError, which says whether the message may have been
// stored. errors.Is finds its cause (the broker's *wire.Error code, ErrConnectionLost,
// ErrClosed, ErrDeliveryTimeout) and one of ErrNotStored or ErrMaybeStored.

var (
	// ErrNotStored marks a message the broker did not store: it was never sent, or every
	// attempt was answered with a refusal that stores nothing, or was cut off by a broker
	// shutdown (SHUTTING_DOWN, which answers everything it stored first). Sending it again
	// cannot duplicate it.
	ErrNotStored = errors.New("lightq: not stored")
	// ErrMaybeStored marks a message that may or may not have been stored: an attempt was
	// sent and its connection broke before the answer, or the broker answered with a code
	// that does not say (INTERNAL, STORAGE_ERROR, a code this client does not know). Sending
	// it again may store it twice.
	ErrMaybeStored = errors.New("lightq: may have been stored")
	// ErrDeliveryTimeout is the cause of a message that was not acknowledged within
	// ProducerOptions.DeliveryTimeout of its batch's first message being sent.
	ErrDeliveryTimeout = errors.New("lightq: delivery timeout")
)

// ProduceError is the outcome of a message that failed after Send took it. Err is the cause;
// MaybeStored tells whether the message may be in the log anyway.
//
//	func(a client.Ack, err error) {
//		var pe *client.ProduceError
//		switch {
//		case err == nil: // stored at a.Partition, a.Offset
//		case errors.As(err, &pe) && pe.MaybeStored(): // look before sending it again
//		default: // not stored: safe to send again
//		}
//	}
type ProduceError struct {
	// Err is the cause: the broker's *wire.Error, or an error wrapping ErrConnectionLost,
	// ErrClosed or ErrDeliveryTimeout.
	Err   error
	maybe bool
}

func newProduceError(cause error, maybe bool) *ProduceError {
	return &ProduceError{Err: cause, maybe: maybe}
}

// MaybeStored reports whether the message may have been stored despite the error.
func (e *ProduceError) MaybeStored() bool { return e.maybe }

func (e *ProduceError) Error() string {
	if e.maybe {
		return e.Err.Error() + " (the message may have been stored)"
	}
	return e.Err.Error() + " (the message was not stored)"
}

// Unwrap returns the cause and ErrMaybeStored or ErrNotStored.
func (e *ProduceError) Unwrap() []error {
	if e.maybe {
		return []error{e.Err, ErrMaybeStored}
	}
	return []error{e.Err, ErrNotStored}
}

// refusal is what the producer does with a broker's refusal of a batch: retry sends it again
// (after a backoff, in order: see Producer), maybe says that the refused attempt may have
// stored it. The codes that close the connection never get here: the producer re-sends
// after the reconnect. doc.go and PROTOCOL.md section 14 give the same table.
type refusal struct{ retry, maybe bool }

func refusalOf(code wire.Code) refusal {
	switch code {
	case wire.CodeStorageFull, // the disk is full: writes resume when space returns
		wire.CodeResourceLimit: // the broker is busy
		return refusal{retry: true}
	case wire.CodeStorageError: // an I/O error, or an fsync that failed after the write
		return refusal{retry: true, maybe: true}
	case wire.CodeInternal: // a broker bug: the batch may have been written
		return refusal{maybe: true}
	case wire.CodeUnknownOpcode, wire.CodeHandshakeRequired, wire.CodeNotAuthenticated,
		wire.CodeAuthFailed, wire.CodeNotAuthorized, wire.CodeUnknownTopic,
		wire.CodeUnknownPartition, wire.CodeTopicExists, wire.CodeInvalidRequest,
		wire.CodeCorruptBatch, wire.CodeMessageTooLarge, wire.CodeNotSupported,
		wire.CodeOffsetOutOfRange, wire.CodeUnknownSubscription,
		wire.CodeUserExists, wire.CodeUnknownUser,
		wire.CodeUnknownMember, wire.CodeFencedMember, wire.CodeGroupNotEmpty, wire.CodeNotCoordinator,
		wire.CodeUnknownBroker, wire.CodeBrokerInUse, wire.CodeReplicasChanged:
		return refusal{} // refused for what it is: sending it again cannot help
	case wire.CodeNotLeader:
		// Nothing was done (PROTOCOL.md section 16). The producer moves the partition to its
		// leader and sends the batch there first (producer_route.go); what gets here is an
		// AckNone batch's refusal, which is not sent again.
		return refusal{}
	case wire.CodeReplicationTimeout:
		// The leader did not hear a quorum in time: the batch may be stored. An idempotent
		// producer sends it again to the leader first (producer_route.go), and the broker
		// answers a stored one with its offsets; without a producer id a re-send could
		// store it twice, so it fails here.
		return refusal{maybe: true}
	case wire.CodeOutOfOrderSequence, wire.CodeProducerFenced, wire.CodeUnknownProducer:
		// Answers to an idempotent batch (PROTOCOL.md section 15): never stored. The producer
		// acts on them first (producer_idem.go): UNKNOWN_PRODUCER bumps the epoch and
		// renumbers the batch and the later ones, which go again; OUT_OF_ORDER_SEQUENCE behind
		// an earlier refused batch waits for it; PRODUCER_FENCED stops the producer. What is
		// left fails here as not stored: PRODUCER_FENCED, and OUT_OF_ORDER_SEQUENCE with
		// nothing earlier outstanding (the broker lost acknowledged batches).
		return refusal{}
	}
	return refusal{maybe: true} // a code this client does not know
}
