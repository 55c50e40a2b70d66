package broker

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lightq/lightq/wire"
)

func (c *rawClient) commit(group, topic string, partition uint32, offset int64) uint32 {
	m := wire.CommitOffset{Group: group, Topic: topic, Partition: partition, Offset: offset}
	return c.send(wire.OpCommitOffset, m.AppendTo(nil))
}

func (c *rawClient) committed(group, topic string, partition uint32) int64 {
	c.t.Helper()
	m := wire.FetchCommitted{Group: group, Topic: topic, Partition: partition}
	var r wire.OffsetResponse
	if err := r.Decode(c.expectResponse(wire.OpFetchCommitted, c.send(wire.OpFetchCommitted, m.AppendTo(nil)))); err != nil {
		c.t.Fatal(err)
	}
	return r.Offset
}

// The caps on (group, partition) pairs: per topic and per broker, refused with
// RESOURCE_LIMIT naming the limit; a stored pair can always be committed again; deleting a
// topic gives its pairs back.
func TestCommitCaps(t *testing.T) {
	srv := startBroker(t, func(c *Config) { c.MaxCommittedOffsetsPerTopic, c.MaxCommittedOffsets = 2, 3 })
	c := login(t, srv.Addr(), testAdminUser, testAdminPass)
	c.createDurable("a", 4)
	c.createDurableFor("b", 4, "b-user", "b-pw")
	c.expectResponse(wire.OpCommitOffset, c.commit("g", "a", 0, 0))
	c.expectResponse(wire.OpCommitOffset, c.commit("g", "a", 1, 0))
	eb := c.expectError(c.commit("g", "a", 2, 0), wire.CodeResourceLimit)
	if !strings.Contains(eb.Message, `topic "a" holds 2 committed (group, partition) pairs`) {
		t.Fatalf("topic cap message: %q", eb.Message)
	}
	c.expectResponse(wire.OpCommitOffset, c.commit("g", "a", 1, 0)) // stored pair: accepted
	c.expectResponse(wire.OpCommitOffset, c.commit("h", "b", 0, 0))
	eb = c.expectError(c.commit("h", "b", 1, 0), wire.CodeResourceLimit)
	if !strings.Contains(eb.Message, "the broker holds 3 committed (group, partition) pairs") {
		t.Fatalf("broker cap message: %q", eb.Message)
	}
	if got := c.committed("h", "b", 1); got != -1 {
		t.Fatalf("refused commit is visible: %d", got)
	}
	m := wire.TopicName{Name: "a"}
	c.expectResponse(wire.OpDeleteTopic, c.send(wire.OpDeleteTopic, m.AppendTo(nil)))
	c.expectResponse(wire.OpCommitOffset, c.commit("h", "b", 1, 0))
}

// A topic's offsets.json of the old format is read at start and written as the new log;
// the new log is what later starts read.
func TestCommittedOffsetsMigrate(t *testing.T) {
	cfg := testConfig(t)
	srv := startWith(t, cfg)
	c := login(t, srv.Addr(), testAdminUser, testAdminPass)
	c.createDurable("log", 2)
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(cfg.DataDir, "topics", "log")
	if err := os.Remove(filepath.Join(dir, "offsets.log")); err != nil {
		t.Fatal(err)
	}
	legacy := `{"format_version": 1, "groups": {"g1": {"0": 0, "1": 0}, "g2": {"1": 0}}}`
	if err := os.WriteFile(filepath.Join(dir, legacyFileName), []byte(legacy), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Addr = "127.0.0.1:0"
	srv = startWith(t, cfg)
	c = login(t, srv.Addr(), testAdminUser, testAdminPass)
	for _, k := range []struct {
		group string
		part  uint32
		want  int64
	}{{"g1", 0, 0}, {"g1", 1, 0}, {"g2", 1, 0}, {"g2", 0, -1}} {
		if got := c.committed(k.group, "log", k.part); got != k.want {
			t.Fatalf("%s/%d = %d after migration, want %d", k.group, k.part, got, k.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "offsets.log")); err != nil {
		t.Fatalf("no offsets log after migration: %v", err)
	}
	c.expectResponse(wire.OpCommitOffset, c.commit("g3", "log", 0, 0))
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv = startWith(t, cfg)
	c = login(t, srv.Addr(), testAdminUser, testAdminPass)
	if c.committed("g3", "log", 0) != 0 || c.committed("g1", "log", 1) != 0 {
		t.Fatal("commits lost after the second restart")
	}
}

// A damaged offsets log makes its topic's offset requests answer STORAGE_ERROR, without
// server paths, and leaves the file as it is; other topics work.
func TestDamagedOffsetsLog(t *testing.T) {
	cfg := testConfig(t)
	srv := startWith(t, cfg)
	c := login(t, srv.Addr(), testAdminUser, testAdminPass)
	c.createDurable("bad", 1)
	c.createDurableFor("good", 1, "g-user", "g-pw")
	for range 3 {
		c.expectResponse(wire.OpCommitOffset, c.commit("g", "bad", 0, 0))
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(cfg.DataDir, "topics", "bad", "offsets.log")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[8+4] ^= 0x40 // the first frame's length: valid frames follow
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Addr = "127.0.0.1:0"
	srv = startWith(t, cfg)
	c = login(t, srv.Addr(), testAdminUser, testAdminPass)
	eb := c.expectError(c.commit("g", "bad", 0, 0), wire.CodeStorageError)
	m := wire.FetchCommitted{Group: "g", Topic: "bad"}
	eb2 := c.expectError(c.send(wire.OpFetchCommitted, m.AppendTo(nil)), wire.CodeStorageError)
	for _, msg := range []string{eb.Message, eb2.Message} {
		if strings.Contains(msg, cfg.DataDir) || !strings.Contains(msg, "damaged") {
			t.Fatalf("message %q", msg)
		}
	}
	c.expectResponse(wire.OpCommitOffset, c.commit("g", "good", 0, 0))
	if after, _ := os.ReadFile(path); string(after) != string(data) {
		t.Fatal("the damaged file was changed")
	}
}

// A connection that pipelines far more commits than maxCommitsInFlight gets every answer, and
// the broker reads at most maxCommitsInFlight of them ahead of their answers: the offsets log
// never holds more of them pending at once, so its group commits hold at most that many each.
// Without the cap the loop read all of them at once and the log wrote them in a few frames.
func TestCommitPipelineCap(t *testing.T) {
	srv := startBroker(t, nil)
	admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
	admin.createDurableFor("piped", 1, "piper", "piper-pw")
	cc := dialCommitter(t, srv.Addr(), "piper", "piper-pw", "piped")
	const n = 20 * maxCommitsInFlight
	pairs := floodPairs("g", 100, 1)
	answered, err := cc.flood(pairs, n, n, nil) // all n sent before any answer is read
	if err != nil || answered != n {
		t.Fatalf("%d of %d commits answered: %v", answered, n, err)
	}
	frames, _ := srv.offsets.lookup("piped").st.Synced()
	t.Logf("%d pipelined commits written in %d group commits", n, frames)
	if frames < n/maxCommitsInFlight {
		t.Fatalf("%d commits in %d group commits: more than %d of one connection's commits were pending at once", n, frames, maxCommitsInFlight)
	}
	// The commits are stored.
	if got := admin.committed("g7", "piped", 0); got != 0 {
		t.Fatalf("FETCH_COMMITTED after the pipeline: %d, want 0", got)
	}
}
