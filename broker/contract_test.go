package broker

import (
	"bytes"
	"io"
	"os"
	"testing"
	"time"
)

// Tests of what PROTOCOL.md says the broker does where no bad-input table row fits: the
// document's own text and examples held against the broker's behaviour.

// TestNotProtocolAnswerIsTheExample: the broker's answer to an HTTP request is, byte for byte,
// the NOT_PROTOCOL example of PROTOCOL.md section 13 (testdata/frames/error-not-protocol.bin,
// which wire's TestProtocolExamples keeps equal to the document).
func TestNotProtocolAnswerIsTheExample(t *testing.T) {
	want, err := os.ReadFile("../testdata/frames/error-not-protocol.bin")
	if err != nil {
		t.Fatal(err)
	}
	srv := startBroker(t, nil)
	c := dialRaw(t, srv.Addr())
	c.write([]byte("GET / HTTP/1.1\r\nHost: broker\r\n\r\n"))
	_ = c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(c.r) // up to the close that follows the ERROR
	if err != nil {
		t.Fatalf("reading the answer: %v (got % x)", err, got)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the broker answered\n%q\nPROTOCOL.md's example is\n%q", got, want)
	}
}
