package lqbench

import (
	"sync/atomic"
	"time"
)

// maxSendLog bounds the memory of a sendLog (8 bytes per message).
const maxSendLog = 16 << 20

// sendLog remembers when each message of an e2e run at a fixed rate was actually handed to
// Send, so the consumers can measure latency from there as well as from the intended slot
// carried in the stamp. A nil *sendLog records nothing. Producers write their own slots and
// consumers read them, concurrently: the slots are atomic.
type sendLog struct {
	slots [][]atomic.Int64 // [producer][sequence] unix ns; 0 until noted
}

// newSendLog returns a log for producers x messages, or nil when that is over maxSendLog.
func newSendLog(producers, messages int) *sendLog {
	if producers > 1<<16 || uint64(messages) >= 1<<48 || uint64(producers)*uint64(messages) > maxSendLog {
		return nil
	}
	l := &sendLog{slots: make([][]atomic.Int64, producers)}
	for i := range l.slots {
		l.slots[i] = make([]atomic.Int64, messages)
	}
	return l
}

// note records that producer id sends message seq now.
func (l *sendLog) note(id, seq int) {
	if l != nil {
		l.slots[id][seq].Store(time.Now().UnixNano())
	}
}

// sentAt returns the send time of the message whose stamp carries idSeq (id<<48 | seq), or 0.
func (l *sendLog) sentAt(idSeq uint64) int64 {
	if l == nil {
		return 0
	}
	id, seq := idSeq>>48, idSeq&(1<<48-1)
	if id >= uint64(len(l.slots)) || seq >= uint64(len(l.slots[id])) {
		return 0
	}
	return l.slots[id][seq].Load()
}
