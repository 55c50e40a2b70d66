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
