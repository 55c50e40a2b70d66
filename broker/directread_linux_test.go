package broker

import (
	"bytes"
	"net"
	"testing"
	"time"
)

// TestReadSocket: socketHolds counts what a socket's receive queue holds, readSocket takes
// exactly that many bytes, and a read of more than the socket holds is refused, not waited for.
func TestReadSocket(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	w, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	r, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	data := make([]byte, 48<<10)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	raw, err := r.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data)+1)
	var held int
	var readErr, shortErr error
	deadline := time.Now().Add(10 * time.Second)
	for held < len(data) && time.Now().Before(deadline) {
		if err := raw.Control(func(fd uintptr) { held = socketHolds(int(fd)) }); err != nil {
			t.Fatal(err)
		}
		if held < len(data) {
			time.Sleep(time.Millisecond) // the bytes are on their way through loopback
		}
	}
	if held != len(data) {
		t.Fatalf("socket holds %d bytes, want %d", held, len(data))
	}
	err = raw.Control(func(fd uintptr) {
		readErr = readSocket(int(fd), got[:len(data)])
		shortErr = readSocket(int(fd), got[len(data):])
	})
	if err != nil {
		t.Fatal(err)
	}
	if readErr != nil || !bytes.Equal(got[:len(data)], data) {
		t.Fatalf("readSocket: %v, bytes equal %v", readErr, bytes.Equal(got[:len(data)], data))
	}
	if shortErr != errShortSocket {
		t.Fatalf("reading from an empty socket: %v, want %v", shortErr, errShortSocket)
	}
}
