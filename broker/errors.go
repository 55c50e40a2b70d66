package broker

import (
	"errors"
	"fmt"

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

// reply sends err as an ERROR (its code if it is an errAnswer) or runs ok.
func (c *conn) reply(corr uint32, err error, ok func()) {
	var ea *errAnswer
	switch {
	case err == nil:
		ok()
	case errors.As(err, &ea):
		c.sendError(corr, ea.code, ea.msg)
	default:
		c.log.Error().Err(err).Msg("request failed")
		c.sendError(corr, wire.CodeStorageError, err.Error())
	}
}

// errorBody is the body of an ERROR frame.
func errorBody(code wire.Code, msg string) []byte {
	eb := wire.ErrorBody{Code: code, Message: msg}
	return eb.AppendTo(nil)
}
