package broker

import (
	"bytes"
	"context"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lightq/lightq/wire"
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

// statsRow is a row of the STATS counter table in PROTOCOL.md.
var statsRow = regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| ")

// TestStatsCountersAreDocumented: the counters STATS reports are the ones PROTOCOL.md's STATS
// section describes, in the same order.
func TestStatsCountersAreDocumented(t *testing.T) {
	doc, err := os.ReadFile("../PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	start := bytes.Index(doc, []byte("### STATS (0x13)"))
	end := bytes.Index(doc, []byte("### PRODUCE (0x20)"))
	if start < 0 || end < start {
		t.Fatal("PROTOCOL.md has no STATS section before the PRODUCE section")
	}
	var documented []string
	for _, m := range statsRow.FindAllSubmatch(doc[start:end], -1) {
		documented = append(documented, string(m[1]))
	}
	var reported []string
	for _, c := range (&topic{}).counters() {
		reported = append(reported, c.Name)
	}
	if !slices.Equal(documented, reported) {
		t.Fatalf("PROTOCOL.md describes the counters %v; STATS reports %v", documented, reported)
	}
}

// TestTopicChangeOutlivesItsConnection: a CREATE_TOPIC, then a DELETE_TOPIC, whose connection
// closes right after sending it is carried out all the same, as PROTOCOL.md says; the answer
// is lost with the connection.
func TestTopicChangeOutlivesItsConnection(t *testing.T) {
	srv := startBroker(t, nil)
	exists := func() bool { _, ok := (*srv.topics.Load())["held"]; return ok }

	c := login(t, srv.Addr(), testAdminUser, testAdminPass)
	ct := wire.CreateTopic{Name: "held", Kind: wire.KindTransient, Partitions: 1, User: "held-user", Password: "held-pw"}
	c.send(wire.OpCreateTopic, ct.AppendTo(nil))
	c.conn.Close()
	waitUntil(t, "created after its connection closed", exists)
	// The topic is whole: its user logs in and produces to it.
	u := login(t, srv.Addr(), "held-user", "held-pw")
	if resp := u.produce("held", 0, testBatch(t, "x")); resp.BaseOffset != 0 {
		t.Fatalf("first batch of the topic at offset %d", resp.BaseOffset)
	}
	admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
	admin.expectError(admin.send(wire.OpCreateTopic, ct.AppendTo(nil)), wire.CodeTopicExists)

	c = login(t, srv.Addr(), testAdminUser, testAdminPass)
	dt := wire.TopicName{Name: "held"}
	c.send(wire.OpDeleteTopic, dt.AppendTo(nil))
	c.conn.Close()
	waitUntil(t, "deleted after its connection closed", func() bool { return !exists() })
	admin.expectError(admin.send(wire.OpDeleteTopic, dt.AppendTo(nil)), wire.CodeUnknownTopic)
}

// TestDeleteTopicEndsWaitingFetch: a FETCH waiting for data on a topic that is deleted is
// answered UNKNOWN_TOPIC with its corr id, and the connection goes on. (Subscriptions:
// TestDeleteTopicEndsSubscriptions.)
func TestDeleteTopicEndsWaitingFetch(t *testing.T) {
	srv := startBroker(t, nil)
	admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
	admin.createDurable("gone-d", 1)
	consumer := login(t, srv.Addr(), "d-user", "d-pw")
	fetch := consumer.sendFetch("gone-d", 0, 0, 60_000) // the partition is empty: it waits
	// Requests are handled in order: once the PING is answered, the FETCH is waiting.
	consumer.ping()
	m := wire.TopicName{Name: "gone-d"}
	admin.expectResponse(wire.OpDeleteTopic, admin.send(wire.OpDeleteTopic, m.AppendTo(nil)))
	// Well before the FETCH's own deadline (expectError waits 10 s at most).
	eb := consumer.expectError(fetch, wire.CodeUnknownTopic)
	if !strings.Contains(eb.Message, "deleted") {
		t.Errorf("the waiting FETCH's error says %q", eb.Message)
	}
	consumer.ping()
}

// TestTransientOffsetsStartAgainAfterRestart: transient offsets are not stored, so after a
// restart a partition's first batch gets offset 0 again (PROTOCOL.md section 9): a partition
// and an offset identify a message only within one run of the broker.
func TestTransientOffsetsStartAgainAfterRestart(t *testing.T) {
	cfg := testConfig(t)
	srv1 := startWith(t, cfg)
	admin := login(t, srv1.Addr(), testAdminUser, testAdminPass)
	admin.createTopic("again", 1, "again-user", "again-pw")
	admin.produce("again", 0, testBatch(t, "a", "b"))
	if resp := admin.produce("again", 0, testBatch(t, "c")); resp.BaseOffset != 2 {
		t.Fatalf("second batch at offset %d, want 2", resp.BaseOffset)
	}
	if err := srv1.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	cfg2 := testConfig(t)
	cfg2.DataDir = cfg.DataDir
	srv2 := startWith(t, cfg2)
	admin = login(t, srv2.Addr(), testAdminUser, testAdminPass)
	if resp := admin.produce("again", 0, testBatch(t, "d")); resp.BaseOffset != 0 {
		t.Fatalf("first batch after the restart at offset %d, want 0", resp.BaseOffset)
	}
}

// TestUserExamplesAreTheBrokers: the users and roles examples of PROTOCOL.md section 13, sent
// as they are to a broker holding what the text describes, get exactly the answers shown.
func TestUserExamplesAreTheBrokers(t *testing.T) {
	golden := func(name string) []byte {
		b, err := os.ReadFile("../testdata/frames/" + name + ".bin")
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	srv := startBroker(t, nil) // its admin is "admin", as in the examples
	a := login(t, srv.Addr(), testAdminUser, testAdminPass)
	a.createTopic("orders", 2, "orders-app", "pa55word")
	for _, ex := range []struct{ request, answer string }{
		{"create-user-request", "create-user-response"},
		{"grant-request", "grant-response"},
		{"list-users-request", "list-users-response"},
		{"set-password-request", ""},
		{"revoke-request", ""},
		{"delete-user-request", "error-unknown-user"},
	} {
		req := golden(ex.request)
		a.write(req)
		f := a.mustRead()
		got := wire.AppendFrame(nil, f.h.Op, f.h.Flags, f.h.Corr, f.body)
		if ex.answer == "" {
			h, _ := wire.PeekHeader(req)
			if f.h.Op != h.Op || f.h.Corr != h.Corr || f.h.Flags != wire.FlagResponse {
				t.Fatalf("%s: answered %s corr %d flags %#x", ex.request, f.h.Op, f.h.Corr, f.h.Flags)
			}
			continue
		}
		if want := golden(ex.answer); !bytes.Equal(got, want) {
			t.Fatalf("%s: the broker answered\n% x\nPROTOCOL.md's %s is\n% x", ex.request, got, ex.answer, want)
		}
	}
}
