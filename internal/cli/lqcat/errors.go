package lqcat

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
)

// Exit codes of lqcat. Scripts test them: never renumber.
const (
	ExitOK          = 0 // everything worked
	ExitFailed      = 1 // some messages were not acknowledged (-P) or skipped as undecodable (-C), or another failure
	ExitUsage       = 2 // bad flags or arguments, missing credentials
	ExitConnect     = 3 // cannot connect, or the connection was lost
	ExitAuth        = 4 // authentication failed, or not authorized
	ExitUnknown     = 5 // unknown topic, partition or user
	ExitTooLarge    = 6 // a message over the broker's MaxMessage
	ExitUnsupported = 7 // the broker or the topic kind does not support it
	ExitExists      = 8 // topic create or user create: it exists
	ExitOutOfRange  = 9 // an offset outside the partition's log
)

// exitError carries the exit code of an error that a broker code cannot tell.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func withCode(code int, err error) error { return &exitError{code: code, err: err} }

func usageErr(format string, args ...any) error {
	return withCode(ExitUsage, fmt.Errorf(format, args...))
}

// errHelp ends a run that printed its help: exit 0.
var errHelp = errors.New("help requested")

// subcommandHelp prints help for a subcommand family called with no subcommand (a usage
// error) or with -h/--help/help (errHelp); otherwise it returns nil and the caller goes on.
func (r *runner) subcommandHelp(args []string, help, missing string) error {
	if len(args) > 0 && args[0] != "-h" && args[0] != "--help" && args[0] != "help" {
		return nil
	}
	io.WriteString(r.stdout, help)
	if len(args) == 0 {
		return usageErr("%s", missing)
	}
	return errHelp
}

// exitCode maps an error to lqcat's exit code.
func exitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	var we *wire.Error
	if errors.As(err, &we) {
		if c := codeFor(we.Code); c != 0 {
			return c
		}
	}
	if errors.Is(err, client.ErrConnectionLost) {
		return ExitConnect
	}
	return ExitFailed
}

// codeFor maps a broker error code to an exit code, 0 when none is specific.
func codeFor(c wire.Code) int {
	switch c {
	case wire.CodeAuthFailed, wire.CodeAuthTimeout, wire.CodeTooManyAttempts,
		wire.CodeNotAuthorized, wire.CodeNotAuthenticated:
		return ExitAuth
	case wire.CodeUnknownTopic, wire.CodeUnknownPartition, wire.CodeUnknownUser:
		return ExitUnknown
	case wire.CodeMessageTooLarge:
		return ExitTooLarge
	case wire.CodeNotSupported:
		return ExitUnsupported
	case wire.CodeTopicExists, wire.CodeUserExists:
		return ExitExists
	case wire.CodeOffsetOutOfRange:
		return ExitOutOfRange
	case wire.CodeShuttingDown, wire.CodeNotProtocol:
		return ExitConnect
	}
	return 0
}

// hint adds a plain-language explanation to the broker errors users meet most.
func hint(err error) string {
	if errors.Is(err, client.ErrDeliveryTimeout) {
		return " (raise the delivery timeout with -X delivery.timeout.ms=MS)"
	}
	var we *wire.Error
	if !errors.As(err, &we) {
		return ""
	}
	switch we.Code {
	case wire.CodeNotAuthorized:
		if strings.Contains(we.Message, "exist") || strings.Contains(we.Message, "needs") {
			return "" // the broker said it already, or which role is missing
		}
		return " (a user may only use the topics it holds roles on; the broker answers the same for a topic that does not exist)"
	case wire.CodeMessageTooLarge:
		return " (over the broker's MaxMessage)"
	}
	return ""
}

// dialCause shortens a dial error to its cause: "connect: connection refused". Other errors
// (a TLS handshake's, which say what to do about them) stay whole.
func dialCause(err error) string {
	if j, ok := err.(interface{ Unwrap() []error }); ok { // every broker of a -b list failed
		var causes []string
		for _, e := range j.Unwrap() {
			var oe *net.OpError
			if errors.As(e, &oe) && oe.Addr != nil {
				causes = append(causes, oe.Addr.String()+": "+dialCause(e))
			} else {
				causes = append(causes, dialCause(e))
			}
		}
		return strings.Join(causes, "; ")
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" && oe.Err != nil {
		return oe.Err.Error()
	}
	return err.Error()
}

// redact removes secrets from a message meant for the terminal. lqcat never puts a password
// into an error itself; this guards against one echoed by something else.
func redact(msg string, secrets []string) string {
	for _, s := range secrets {
		if len(s) >= 3 {
			msg = strings.ReplaceAll(msg, s, "***")
		}
	}
	return msg
}
