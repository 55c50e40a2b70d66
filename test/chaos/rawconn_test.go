package chaos

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/lightq/lightq/broker/brokertest"
	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
)

// TestRawConnAgainstBroker runs RawConn against a broker without cluster settings, which
// answers METADATA's cluster flag as a cluster of one (PROTOCOL.md section 16).
func TestRawConnAgainstBroker(t *testing.T) {
	srv := brokertest.Start(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := client.Dial(ctx, srv.Addr(), client.Options{User: brokertest.AdminUser, Password: brokertest.AdminPassword})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.CreateTopic(ctx, client.TopicConfig{Name: "raw", Kind: wire.KindDurable, Partitions: 2}); err != nil {
		t.Fatal(err)
	}

	if _, err := DialRaw(ctx, srv.Addr(), brokertest.AdminUser, "wrong"); !errors.Is(err, &wire.Error{Code: wire.CodeAuthFailed}) {
		t.Fatalf("wrong password: %v, want AUTH_FAILED", err)
	}
	c, err := DialRaw(ctx, srv.Addr(), brokertest.AdminUser, brokertest.AdminPassword)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	md, err := c.ClusterMetadata(ctx, "raw")
	if err != nil {
		t.Fatal(err)
	}
	if md.NodeID != 1 || len(md.Brokers) != 1 || md.Brokers[0].NodeID != 1 {
		t.Fatalf("cluster of one: node %d, brokers %+v", md.NodeID, md.Brokers)
	}
	if got := Leaders(md, "raw"); len(got) != 2 || got[0] != 1 || got[1] != 1 {
		t.Fatalf("leaders %v, want node 1 for both partitions", got)
	}
	if Leaders(md, "other") != nil {
		t.Fatal("Leaders of a topic not in the answer is not nil")
	}
	if !slices.Equal(md.Topics[0].Partitions[1].Replicas, []uint32{1}) {
		t.Fatalf("replicas %v", md.Topics[0].Partitions[1].Replicas)
	}

	v := make([]byte, 40)
	FillPayload(v, true, MsgID{1, 0}, func() uint64 { return 1 })
	for want := int64(0); want < 3; want++ {
		off, err := c.Produce(ctx, "raw", 1, wire.AcksWritten, v)
		if err != nil || off != want {
			t.Fatalf("produce: offset %d, %v; want %d", off, err, want)
		}
	}
	if _, err := c.Produce(ctx, "nope", 0, wire.AcksWritten, v); !errors.Is(err, &wire.Error{Code: wire.CodeUnknownTopic}) {
		t.Fatalf("unknown topic: %v", err)
	}
	// Still usable after a refusal.
	if _, err := c.ClusterMetadata(ctx); err != nil {
		t.Fatal(err)
	}

	// A context that ends interrupts a request waiting for its answer (a FETCH long poll
	// at the end of the log).
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancelShort()
	fetch := wire.Fetch{Topic: "raw", Partition: 0, Offset: 0, MaxBytes: 1 << 10, MaxWaitMs: 10000}
	if _, err := c.Request(short, wire.OpFetch, fetch.AppendTo(nil)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("long poll past the context: %v", err)
	}
}

func TestReadFrame(t *testing.T) {
	good := wire.AppendFrame(nil, wire.OpPing, wire.FlagResponse, 7, []byte("body"))
	big := wire.AppendFrame(nil, wire.OpPing, 0, 1, make([]byte, 100))
	cases := []struct {
		name string
		in   []byte
		err  error // nil: the frame reads
	}{
		{"frame", good, nil},
		{"empty", nil, io.EOF},
		{"short header", good[:10], io.ErrUnexpectedEOF},
		{"short body", good[:len(good)-1], io.ErrUnexpectedEOF},
		{"bad magic", append([]byte{0, 0, 0, 12, 'X', 'Y'}, good[6:]...), wire.ErrNotProtocol},
		{"over the limit", big, wire.ErrFrameTooLarge},
	}
	for _, tc := range cases {
		h, body, err := ReadFrame(bytes.NewReader(tc.in), 64)
		switch {
		case tc.err == nil && (err != nil || h.Op != wire.OpPing || h.Corr != 7 || string(body) != "body"):
			t.Errorf("%s: %+v %q %v", tc.name, h, body, err)
		case tc.err != nil && !errors.Is(err, tc.err):
			t.Errorf("%s: err %v, want %v", tc.name, err, tc.err)
		}
	}
}

func FuzzReadFrame(f *testing.F) {
	f.Add(wire.AppendFrame(nil, wire.OpMetadata, wire.FlagResponse, 1, []byte{0, 0, 0, 0}))
	f.Add([]byte{0, 0, 0, 255})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, body, err := ReadFrame(bytes.NewReader(b), 4096)
		if err == nil && (h.Size() != wire.HeaderSize+len(body) || h.Size() > len(b) || h.Size() > 4096) {
			t.Fatalf("frame of %d bytes with a %d-byte body from %d bytes", h.Size(), len(body), len(b))
		}
	})
}
