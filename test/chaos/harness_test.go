package chaos

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
)

// TestHarnessSingleBroker runs the harness end to end on what every build has: one broker
// process without cluster settings (a cluster of one, PROTOCOL.md section 16) behind its
// client proxy, the workload through kill -9, SIGSTOP/SIGCONT and SIGTERM of the process and
// the kill-all and rolling-restart cycles,
// the final read from the leader and of the replica's files, and the checker, which must
// find nothing wrong, and must find the loss planted in the history afterwards.
func TestHarnessSingleBroker(t *testing.T) {
	if testing.Short() {
		t.Skip("a broker process through kill -9; skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := newCluster(t, 1, false)
	if err := c.startAll(); err != nil {
		t.Fatal(err)
	}
	c.topic, c.parts = topicName, partitions
	n := c.nodes[0]
	if err := c.createTopic(ctx, []wire.Option{{Key: "fsync", Value: "always"}, {Key: "segment.bytes", Value: strconv.Itoa(segmentBytes)}}); err != nil {
		t.Fatal(err)
	}
	if err := c.waitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	leaders, ok := c.leadersNow(ctx, true)
	if !ok || leaders[0] != 1 || leaders[2] != 1 {
		t.Fatalf("leaders %v, want node 1 for every partition", leaders)
	}
	w, err := startWorkload(ctx, c, workloadConfig{producers: 2, acks: client.AckWritten, rate: 300, maxMessages: 100_000, maxPayload: 512}, 1)
	if err != nil {
		t.Fatal(err)
	}
	step := func(what string) {
		t.Helper()
		if !w.waitProgress(ctx, 100, progressTimeout) {
			w.abort()
			t.Fatalf("no progress %s (send errors %v)\n%s", what, w.sendErrs, c.logs())
		}
	}
	step("at the start")

	pid := n.proc.pid
	c.kill(n)
	if n.up() {
		t.Fatal("node up after kill -9")
	}
	c.start(n)
	if n.proc.pid == pid || n.starts != 2 {
		t.Fatalf("restart: pid %d (was %d), starts %d", n.proc.pid, pid, n.starts)
	}
	if err := c.waitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	step("after kill -9 and a restart")

	c.pause(n)
	if err := c.waitHealthy(ctx); err == nil || !strings.Contains(err.Error(), "paused") {
		t.Fatalf("waitHealthy with the broker paused: %v", err)
	}
	c.resume(n)
	step("after SIGSTOP and SIGCONT")

	c.stop(n)
	if n.proc.waitErr != nil {
		t.Errorf("SIGTERM: the broker exited with %v", n.proc.waitErr)
	}
	c.start(n)
	if err := c.waitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	step("after SIGTERM and a restart")

	// Two of the fault cycles that need no second broker, as make chaos runs them.
	r := newChaosRun(c, w, 1, wire.AcksWritten)
	for _, kind := range []faultKind{killAll, rollingRestart} {
		note, err := r.cycle(ctx, kind)
		if err != nil {
			t.Fatalf("%s: %v\n%s", kind, err, c.logs())
		}
		t.Logf("%s: %s", kind, note)
		step("after " + string(kind))
	}
	if n.starts != 5 {
		t.Errorf("node started %d times, want 5", n.starts)
	}

	flushErrs := w.stop(time.Minute)
	leader, hw, err := c.readAll(ctx)
	if err != nil {
		t.Fatalf("%v\n%s", err, c.logs())
	}
	c.stop(n)
	replicas, err := c.readReplicas()
	if err != nil {
		t.Fatal(err)
	}
	o := w.outcome()
	live, liveErr := w.liveReads()
	in := Input{Acked: o.acked, Sent: func(id MsgID) bool { return o.sent[id] }, NotStored: func(id MsgID) bool { return o.notStored[id] }, Leader: leader, HW: hw, Replicas: replicas, Live: live}
	res := Check(in)
	t.Logf("attempted %d acked %d failed %d indeterminate %d; consumed %d; hw %v; compared %v; flush errors %v; consumer %v",
		o.attempted, len(o.acked), o.failed, o.indeterminate, len(live), hw, res.Compared, flushErrs, liveErr)
	if res.Failed() || res.Acked < 400 || res.Records < res.Acked {
		t.Fatalf("acked %d records %d; problems:\n  %s", res.Acked, res.Records, strings.Join(res.Problems, "\n  "))
	}
	for p, r := range replicas {
		if len(r) != 1 || r[0].HasState || r[0].Damage != nil || r[0].End != hw[p] || res.Compared[p] != [2]int64{0, hw[p]} {
			t.Errorf("partition %d: replica %+v, compared %v, hw %d", p, r[0], res.Compared[p], hw[p])
		}
	}

	// The same data with a loss planted: an acknowledgement the log contradicts.
	in.Acked = append(in.Acked, Acked{ID: MsgID{1, 1 << 40}, Partition: 0, Offset: hw[0]})
	if res := Check(in); res.Lost != 1 {
		t.Fatalf("planted loss: lost %d, want 1", res.Lost)
	}
	// And a replica with one bit flipped in its first batch (a single broker's log has no
	// raft state: its walk stops there, and the acknowledged messages after it are missing
	// from the replica's log).
	seg := filepath.Join(PartitionDir(n.dir, c.topic, 1), "00000000000000000000.log")
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	data[wire.BatchHeaderSize2+2] ^= 1
	if err := os.WriteFile(seg, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if in.Replicas, err = c.readReplicas(); err != nil {
		t.Fatal(err)
	}
	in.Acked = o.acked
	res = Check(in)
	if in.Replicas[1][0].Damage == nil || res.Behind != 1 {
		t.Fatalf("flipped bit: damage %v, behind %d; problems %v", in.Replicas[1][0].Damage, res.Behind, res.Problems)
	}
}
