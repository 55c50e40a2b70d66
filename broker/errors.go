package broker

import (
	"errors"
	"fmt"

	"github.com/lightq/lightq/broker/meta"
	qlog "github.com/lightq/lightq/log"
	"github.com/lightq/lightq/wire"
)

// This file holds how a failed request is answered. A handler whose work runs off the loop
// (createTopic, deleteTopic, offsetStore.commit, option parsing) returns an error; reply turns
// it into the ERROR frame: an errAnswer carries its own code, anything else is a
// STORAGE_ERROR. Errors of the log map to codes in storageCode (durable.go).

// errAnswer is a failure with the code the client gets.
type errAnswer struct {
	code wire.Code
	msg  string
}

func (e *errAnswer) Error() string { return e.msg }

// answer makes an errAnswer with a formatted message.
func answer(code wire.Code, format string, args ...any) error {
	return &errAnswer{code: code, msg: fmt.Sprintf(format, args...)}
}

// reply sends err as an ERROR (see replyFor) or runs ok.
func (c *conn) reply(corr uint32, err error, ok func()) {
	if err == nil {
		ok()
		return
	}
	code, msg, logIt := replyFor(err)
	if logIt {
		c.log.Error().Err(err).Msg("request failed")
	}
	c.sendError(corr, code, msg)
}

// replyFor is the code and text a client gets for a failed request, and whether the broker
// logs the error: an errAnswer's own code and text; a state meta refuses to store
// (meta.ErrInvalid: a value the request should not have carried, which the handlers check
// first) is INVALID_REQUEST with meta's text, which names no file; anything else means a
// metadata or offsets file could not be written, and since its text names server paths the
// client gets STORAGE_ERROR and only what happened, the log the details.
func replyFor(err error) (code wire.Code, msg string, logIt bool) {
	var ea *errAnswer
	switch {
	case errors.As(err, &ea):
		return ea.code, ea.msg, false
	case errors.Is(err, meta.ErrInvalid):
		return wire.CodeInvalidRequest, err.Error(), true
	}
	return wire.CodeStorageError, "the broker could not store the change; its log has the details", true
}

// errorBody is the body of an ERROR frame.
func errorBody(code wire.Code, msg string) []byte {
	eb := wire.ErrorBody{Code: code, Message: msg}
	return eb.AppendTo(nil)
}

// sendStorageError answers a request that a partition's log failed (Read, Append, Sync,
// OffsetForTime, or a partition that could not be recovered at start). The client gets the
// code and a text naming the partition and what went wrong, never the log's own text: that
// carries the broker's file paths and byte positions, which go to the broker's log instead.
// Expected outcomes (an offset out of range, a deleted topic) are not logged.
// topic is "" where the caller does not know it (a durable ack names only its partition).
func (c *conn) sendStorageError(corr uint32, topic string, partition uint32, err error) {
	c.sendStorageErrorCode(corr, storageCode(err), topic, partition, err)
}

// sendStorageErrorCode is sendStorageError with a code chosen by the caller.
func (c *conn) sendStorageErrorCode(corr uint32, code wire.Code, topic string, partition uint32, err error) {
	if code != wire.CodeOffsetOutOfRange && code != wire.CodeUnknownTopic {
		c.log.Warn().Err(err).Str("topic", topic).Uint32("partition", partition).Msg("storage error answered")
	}
	c.sendError(corr, code, storageMessage(topic, partition, err))
}

// storageMessage is the client's text for a log error: the sentinel's meaning, without paths.
func storageMessage(topic string, partition uint32, err error) string {
	where := fmt.Sprintf("partition %d", partition)
	if topic != "" {
		where = fmt.Sprintf("topic %q partition %d", topic, partition)
	}
	var re *qlog.RangeError
	switch {
	case errors.As(err, &re):
		return fmt.Sprintf("%s: offset %d is outside the log, which holds [%d, %d)", where, re.Offset, re.Start, re.Next)
	case errors.Is(err, qlog.ErrOffsetOutOfRange):
		return where + ": offset out of range"
	case errors.Is(err, qlog.ErrClosed):
		return where + ": the topic was deleted"
	case errors.Is(err, qlog.ErrStorageFull):
		return where + ": the broker's disk is full; writes resume when space is freed"
	case errors.Is(err, qlog.ErrCorrupt):
		return where + ": the partition's files are damaged and it serves nothing until repaired; the broker's log says where"
	case errors.Is(err, qlog.ErrBroken):
		return where + ": the partition stopped taking writes after a storage failure; it recovers on a broker restart"
	}
	return where + ": storage error; the broker's log has the details"
}
