package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lightq/lightq/wire"
)

// Connecting and reconnecting: a new link is dialled, greeted (HELLO) and logged in (AUTH)
// before it is installed as its node's working connection (node.go). Dial does it once and
// returns the error; after a connection breaks, the node's reconnector goroutine does it until
// it succeeds, the Conn is closed, the node is no longer wanted, or the broker refuses the
// credentials.

func (l *link) handshake(ctx context.Context) error {
	hello := wire.Hello{ClientName: l.c.opts.ClientName, ClientVersion: "lightq-go/" + Version}
	body, err := l.c.exchange(ctx, l, wire.OpHello, hello.AppendTo(nil), true)
	if err != nil {
		return handshakeErr("HELLO", explainTLSRefusal(err))
	}
	var hr wire.HelloResponse
	if err := hr.Decode(body); err != nil {
		return fmt.Errorf("%w: HELLO response: %w", ErrProtocol, err)
	}
	if err := hr.Limits.Validate(); err != nil {
		return fmt.Errorf("%w: broker announced bad limits: %v", ErrProtocol, err)
	}
	l.limits, l.broker = hr.Limits, hr.BrokerVersion
	l.maxFrame.Store(int64(hr.Limits.MaxFrame))

	body, err = l.authenticate(ctx)
	if err != nil {
		return handshakeErr("AUTH", err)
	}
	var ar wire.AuthResponse
	if err := ar.Decode(body); err != nil {
		return fmt.Errorf("%w: AUTH response: %w", ErrProtocol, err)
	}
	l.role = ar.Role
	return nil
}

// authenticate sends AUTH, again while the broker answers RESOURCE_LIMIT: it bounds the
// logins it verifies at once (PROTOCOL.md 4.2), so a service that opens many connections at
// start gets some of them refused until the first login has been verified, after which the
// others are answered from the broker's cache. The connection stays open across such an
// answer; the retries back off from 10 ms to 500 ms, with jitter, until ctx (DialTimeout) ends.
func (l *link) authenticate(ctx context.Context) ([]byte, error) {
	auth := wire.Auth{User: l.c.opts.User, Password: l.c.opts.Password}
	req := auth.AppendTo(nil)
	bo := backoff{min: 10 * time.Millisecond, max: 500 * time.Millisecond}
	for {
		body, err := l.c.exchange(ctx, l, wire.OpAuth, req, true)
		if !errors.Is(err, &wire.Error{Code: wire.CodeResourceLimit}) {
			return body, err
		}
		if !sleep(ctx, nil, bo.next()) {
			return nil, err
		}
	}
}

// handshakeErr returns broker refusals as they are and names the step otherwise.
func handshakeErr(step string, err error) error {
	var we *wire.Error
	if errors.As(err, &we) && !errors.Is(err, ErrConnectionLost) {
		return we
	}
	return fmt.Errorf("lightq: %s: %w", step, err)
}
