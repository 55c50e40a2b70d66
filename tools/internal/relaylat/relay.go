package relaylat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// Roles: the first byte each client sends after connecting, and the byte the relay sends the
// consumer once both are connected.
const (
	roleProducer = 'p'
	roleConsumer = 'c'
	relayReady   = 'r'
)

// relayBuf is the relay's read buffer, the size of the clients' read buffers.
const relayBuf = 64 << 10

// relayStats is the line the relay prints when it is done.
type relayStats struct {
	Reads int64 `json:"reads"`
	Bytes int64 `json:"bytes"`
}

// relay listens on 127.0.0.1:0 and prints the address as one line, accepts the producer and
// then the consumer (each names itself with one byte), tells the consumer it is ready, and
// copies everything the producer sends to the consumer until the producer's EOF, which it
// passes on. Then it prints its relayStats as one JSON line.
func relay(ctx context.Context, stdout io.Writer) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	go func() { <-ctx.Done(); ln.Close() }()
	if _, err := fmt.Fprintln(stdout, ln.Addr().String()); err != nil {
		return err
	}
	prod, err := acceptRole(ln, roleProducer)
	if err != nil {
		return err
	}
	defer prod.Close()
	cons, err := acceptRole(ln, roleConsumer)
	if err != nil {
		return err
	}
	defer cons.Close()
	ln.Close()
	go func() { <-ctx.Done(); prod.Close(); cons.Close() }()
	if _, err := cons.Write([]byte{relayReady}); err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	var st relayStats
	buf := make([]byte, relayBuf)
	for {
		n, err := prod.Read(buf)
		if n > 0 {
			st.Reads++
			st.Bytes += int64(n)
			if _, werr := cons.Write(buf[:n]); werr != nil {
				return fmt.Errorf("write to the consumer after %d bytes: %w", st.Bytes, werr)
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read from the producer after %d bytes: %w", st.Bytes, err)
		}
	}
	if err := cons.CloseWrite(); err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(st)
}

// acceptRole accepts one connection and checks that its first byte is role.
func acceptRole(ln net.Listener, role byte) (*net.TCPConn, error) {
	c, err := ln.Accept()
	if err != nil {
		return nil, fmt.Errorf("accept: %w", err)
	}
	var b [1]byte
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, b[:]); err != nil {
		c.Close()
		return nil, fmt.Errorf("role byte: %w", err)
	}
	if b[0] != role {
		c.Close()
		return nil, fmt.Errorf("connection says it is %q, want %q", b[0], role)
	}
	_ = c.SetReadDeadline(time.Time{})
	return c.(*net.TCPConn), nil
}
