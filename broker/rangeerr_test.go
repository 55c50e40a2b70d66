package broker

import (
	"strings"
	"testing"

	"github.com/lightq/lightq/broker/meta"
	"github.com/lightq/lightq/wire"
)

// TestOptionRangeErrors: a topic option out of range is refused with INVALID_REQUEST, and the
// message names the option, the value given and the range it must be in.
func TestOptionRangeErrors(t *testing.T) {
	s := &Server{cfg: DefaultConfig()}
	maxBatch := s.cfg.Limits.MaxBatch
	for _, tc := range []struct {
		kind  wire.Kind
		opt   wire.Option
		wants []string
	}{
		{wire.KindDurable, wire.Option{Key: "segment.bytes", Value: "1048576"}, []string{`segment.bytes: "1048576"`, "from 2097152", "to 1073741824"}},
		{wire.KindDurable, wire.Option{Key: "segment.bytes", Value: "2GiB"}, []string{`segment.bytes: "2GiB"`, "an integer from"}},
		{wire.KindDurable, wire.Option{Key: "retention.bytes", Value: "-1"}, []string{`retention.bytes: "-1"`, "from 0"}},
		{wire.KindTransient, wire.Option{Key: "ring.bytes", Value: "1024"}, []string{`ring.bytes: "1024"`, "from 2097152", "to 1073741824"}},
		{wire.KindTransient, wire.Option{Key: "ring.slots", Value: "1"}, []string{`ring.slots: "1"`, "from 2 to 1048576"}},
	} {
		if maxBatch != 1<<20 {
			t.Fatalf("the cases assume a 1 MiB max batch, not %d", maxBatch)
		}
		_, err := s.parseTopicOptions(meta.Topic{Kind: tc.kind, Partitions: 1, Options: []wire.Option{tc.opt}})
		code, msg, _ := replyFor(err)
		if code != wire.CodeInvalidRequest {
			t.Errorf("%s=%s: code %v (%v), want INVALID_REQUEST", tc.opt.Key, tc.opt.Value, code, err)
		}
		for _, want := range tc.wants {
			if !strings.Contains(msg, want) {
				t.Errorf("%s=%s: %q lacks %q", tc.opt.Key, tc.opt.Value, msg, want)
			}
		}
	}
}

// TestSubscribeDurableNamesTheWay: SUBSCRIBE to a durable topic is NOT_SUPPORTED, and the
// message says what reads one: FETCH, or the Go client's NewConsumer.
func TestSubscribeDurableNamesTheWay(t *testing.T) {
	srv := startBroker(t, nil)
	c := login(t, srv.Addr(), testAdminUser, testAdminPass)
	m := wire.CreateTopic{Name: "d", Kind: wire.KindDurable, Partitions: 1, User: "d-user", Password: "d-password-1"}
	c.expectResponse(wire.OpCreateTopic, c.send(wire.OpCreateTopic, m.AppendTo(nil)))
	sub := wire.Subscribe{Topic: "d", Partition: wire.PartitionAny, Credit: 1 << 20}
	eb := c.expectError(c.send(wire.OpSubscribe, sub.AppendTo(nil)), wire.CodeNotSupported)
	for _, want := range []string{`"d" is durable`, "FETCH", "NewConsumer"} {
		if !strings.Contains(eb.Message, want) {
			t.Errorf("message %q lacks %q", eb.Message, want)
		}
	}
}
