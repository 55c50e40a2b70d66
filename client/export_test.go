package client

import (
	"context"
	"net"
)

// DialOver is Dial over nc instead of a new TCP connection: tests run the client against the
// fake broker through a net.Pipe, which testing/synctest can put in a bubble (a real socket
// cannot be in one). The Conn owns nc.
func DialOver(ctx context.Context, nc net.Conn, opts Options) (*Conn, error) {
	return dial(ctx, opts, func(context.Context) (net.Conn, error) { return nc, nil })
}
