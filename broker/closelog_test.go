package broker

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

// lineWatch is a log writer that hands each "connection closed" line to a channel, so a test
// waits for the line instead of sleeping.
type lineWatch struct {
	mu     sync.Mutex
	closed chan string
}

func (w *lineWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if bytes.Contains(p, []byte(`"connection closed"`)) {
		w.closed <- string(p)
	}
	return len(p), nil
}

// TestNormalDisconnectLogsAtDebug: a client that closes its connection (EOF) or resets it is
// a debug line without an error, not an info line with "read: EOF".
func TestNormalDisconnectLogsAtDebug(t *testing.T) {
	watch := &lineWatch{closed: make(chan string, 8)}
	srv := startBroker(t, func(cfg *Config) { cfg.Logger = zerolog.New(watch).Level(zerolog.DebugLevel) })
	for _, tc := range []struct {
		name  string
		close func(net.Conn)
	}{
		{"EOF", func(c net.Conn) { c.Close() }},
		{"reset", func(c net.Conn) { c.(*net.TCPConn).SetLinger(0); c.Close() }},
	} {
		c := login(t, srv.Addr(), testAdminUser, testAdminPass)
		tc.close(c.conn)
		select {
		case line := <-watch.closed:
			if !strings.Contains(line, `"level":"debug"`) || strings.Contains(line, `"error"`) {
				t.Errorf("%s: logged %s, want a debug line without an error", tc.name, line)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no \"connection closed\" line", tc.name)
		}
	}
}

// TestIsPeerGone: the normal ways a client goes are told apart from real failures, which
// OnClose keeps at info level.
func TestIsPeerGone(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{os.NewSyscallError("read", io.EOF), true},
		{io.EOF, true},
		{os.NewSyscallError("read", unix.ECONNRESET), true},
		{os.NewSyscallError("write", unix.EPIPE), true},
		{net.ErrClosed, true},
		{os.NewSyscallError("read", unix.ETIMEDOUT), false},
		{os.NewSyscallError("read", unix.EIO), false},
		{errors.New("gnet: something else"), false},
	} {
		if got := isPeerGone(tc.err); got != tc.want {
			t.Errorf("isPeerGone(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
