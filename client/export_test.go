package client

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
)

// DialOver is Dial over nc instead of a new TCP connection: tests run the client against the
// fake broker through a net.Pipe, which testing/synctest can put in a bubble (a real socket
// cannot be in one). The Conn owns nc. It cannot reconnect: every later attempt fails.
func DialOver(ctx context.Context, nc net.Conn, opts Options) (*Conn, error) {
	var used atomic.Bool
	return dial(ctx, opts, []string{""}, func(context.Context) (net.Conn, error) {
		if used.Swap(true) {
			return nil, errors.New("no more connections")
		}
		return nc, nil
	})
}

// DialFunc is Dial with open making each connection, the first and every reconnect's.
func DialFunc(ctx context.Context, open func(context.Context) (net.Conn, error), opts Options) (*Conn, error) {
	return dial(ctx, opts, []string{""}, open)
}

// InlineBatches is how many batches s's reader handed to a lent handler (InlineHandler).
func InlineBatches(s *Subscription) uint64 { return s.inlineN.Load() }
