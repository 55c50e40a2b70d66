package wire

import "fmt"

// Idempotent produce (PROTOCOL.md section 15). A producer asks INIT_PRODUCER for an id and an
// epoch once, then numbers the records it sends to each partition 0, 1, 2, ... (wrapping
// after MaxSequence, see NextSequence) and stamps every batch it seals with the id, the epoch
// and the sequence of the batch's first record (BatchBuilder.SetProducer, magic 2). The
// broker stores a batch only if its base sequence is the next one it expects from that id in
// that partition, and answers a batch it already stored, among the last Window batches of
// the id there, with the original ack.

// InitProducer is the body of an INIT_PRODUCER request. A new producer sends NoProducer for
// both fields; a producer that wants to fence an earlier incarnation of itself (its batches
// still in flight, or a process that used the same id before) sends the id and epoch it had,
// and gets the same id with the next epoch.
type InitProducer struct {
	PreviousID    int64 // NoProducer, or an id an earlier INIT_PRODUCER gave
	PreviousEpoch int16 // NoProducer when PreviousID is, else the epoch it was given
}

// InitProducerSize is the fixed size of an INIT_PRODUCER request body.
const InitProducerSize = 10

func (m *InitProducer) AppendTo(dst []byte) []byte {
	dst = AppendI64(dst, m.PreviousID)
	return AppendU16(dst, uint16(m.PreviousEpoch))
}

func (m *InitProducer) Decode(b []byte) error {
	r := NewReader(b)
	m.PreviousID = r.I64()
	m.PreviousEpoch = int16(r.U16())
	if err := r.Done("INIT_PRODUCER request"); err != nil {
		return err
	}
	if !(m.PreviousID == NoProducer && m.PreviousEpoch == NoProducer || m.PreviousID >= 0 && m.PreviousEpoch >= 0) {
		return fmt.Errorf("%w: previous producer id %d and epoch %d: want both -1, or both >= 0", ErrMalformed, m.PreviousID, m.PreviousEpoch)
	}
	return nil
}

// InitProducerResponse gives a producer its id and epoch, and the broker's rules for them.
type InitProducerResponse struct {
	ProducerID    int64
	ProducerEpoch int16
	// Window is how many of a producer's most recent batches per partition the broker
	// remembers: a re-sent batch among them is answered with its original offsets. A producer
	// MUST NOT have more than Window batches in flight (sent, not yet answered) per partition.
	Window uint16
	// ExpiryMs is how long the broker keeps the state of a producer id that sends nothing to
	// a partition; after it, the next batch there must start a new sequence (0).
	ExpiryMs uint32
}

// InitProducerResponseSize is the fixed size of an INIT_PRODUCER response body.
const InitProducerResponseSize = 16

func (m *InitProducerResponse) AppendTo(dst []byte) []byte {
	dst = AppendI64(dst, m.ProducerID)
	dst = AppendU16(dst, uint16(m.ProducerEpoch))
	dst = AppendU16(dst, m.Window)
	return AppendU32(dst, m.ExpiryMs)
}

func (m *InitProducerResponse) Decode(b []byte) error {
	r := NewReader(b)
	m.ProducerID = r.I64()
	m.ProducerEpoch = int16(r.U16())
	m.Window = r.U16()
	m.ExpiryMs = r.U32()
	if err := r.Done("INIT_PRODUCER response"); err != nil {
		return err
	}
	if m.ProducerID < 0 || m.ProducerEpoch < 0 || m.Window == 0 {
		return fmt.Errorf("%w: INIT_PRODUCER response with producer id %d, epoch %d, window %d", ErrMalformed, m.ProducerID, m.ProducerEpoch, m.Window)
	}
	return nil
}
