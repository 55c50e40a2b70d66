package lqcat

import (
	"context"
	"testing"

	"github.com/lightq/lightq/internal/poisontest"
	"github.com/lightq/lightq/log"
	"github.com/lightq/lightq/wire"
)

// TestConsumeControlBatches: -C prints the records of a log that holds control batches (a
// replicated partition's raft entries without messages, PROTOCOL.md section 7) and nothing for
// the control batches, without a warning; -e ends at the end of the log although its last
// batch is a control batch; a group commits the end of the log.
func TestConsumeControlBatches(t *testing.T) {
	e := newPoisonEnv(t, func(dir string) {
		poisontest.Append(t, dir, log.Options{SegmentBytes: 1},
			wire.AppendControlBatch(nil, wire.ControlEmptyEntry, nil),                 // 0
			poisontest.Batch(1000, "a0", "a1"),                                        // 1-2
			wire.AppendControlBatch(nil, wire.ControlConfChange, []byte{8, 0, 16, 3}), // 3
			poisontest.Batch(2000, "b0"),                                              // 4
			wire.AppendControlBatch(nil, wire.ControlEmptyEntry, nil),                 // 5, the end of the log
		)
	})
	const printed = "1 a0\n2 a1\n4 b0\n"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-C", "-t", "d", "-e", "-f", `%o %s\n`}, printed},
		{[]string{"-C", "-t", "d", "-e", "-o", "3", "-f", `%o %s\n`}, "4 b0\n"},
		{[]string{"-C", "-t", "d", "-e", "-G", "g", "-f", `%o %s\n`}, printed},
	} {
		r := e.run("", tc.args...)
		if r.code != 0 || r.out != tc.want || r.err != "" {
			t.Fatalf("lqcat %q: exit %d, stdout\n%s\nstderr\n%s", tc.args, r.code, r.out, r.err)
		}
	}
	off, err := e.admin().FetchCommitted(context.Background(), wire.FetchCommitted{Group: "g", Topic: "d"})
	if err != nil || off != 6 {
		t.Fatalf("group g committed %d (%v), want 6", off, err)
	}
	if got := e.ok("", "-C", "-t", "d", "-e", "-o", "5"); got != "" {
		t.Fatalf("-o 5 (the trailing control batch): %q", got)
	}
}
