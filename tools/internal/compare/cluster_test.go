package compare

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lightq/lightq/wire"
)

// fakeMetaBroker answers HELLO and AUTH (a wrong password with ERROR), and METADATA with
// the cluster layout answer(req) gives, on a loopback port; every connection is served until
// the test ends. Before each METADATA response it sends a stray frame with another
// correlation id, which a client must skip.
func fakeMetaBroker(t *testing.T, answer func(wire.MetadataRequest) (wire.MetadataResponse, *wire.ErrorBody)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	closed := false
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		closed = true
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			if closed {
				c.Close()
			}
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				serveFakeMeta(c, answer)
			}()
		}
	}()
	return ln.Addr().String()
}

func serveFakeMeta(c net.Conn, answer func(wire.MetadataRequest) (wire.MetadataResponse, *wire.ErrorBody)) {
	r := bufio.NewReader(c)
	for {
		head := make([]byte, wire.HeaderSize)
		if _, err := io.ReadFull(r, head); err != nil {
			return
		}
		n, err := wire.FrameSize(head, 1<<20)
		if err != nil {
			return
		}
		frame := append(head, make([]byte, n-wire.HeaderSize)...)
		if _, err := io.ReadFull(r, frame[wire.HeaderSize:]); err != nil {
			return
		}
		h, body, err := wire.ParseFrame(frame)
		if err != nil {
			return
		}
		reply := func(op wire.Op, b []byte) { _, _ = c.Write(wire.AppendFrame(nil, op, wire.FlagResponse, h.Corr, b)) }
		fail := func(eb wire.ErrorBody) {
			_, _ = c.Write(wire.AppendFrame(nil, wire.OpError, 0, h.Corr, eb.AppendTo(nil)))
		}
		switch h.Op {
		case wire.OpHello:
			hr := wire.HelloResponse{ProtocolVersion: 1, BrokerVersion: "fake"}
			reply(h.Op, hr.AppendTo(nil))
		case wire.OpAuth:
			var a wire.Auth
			if a.Decode(body) != nil || a.Password != "pw" {
				fail(wire.ErrorBody{Code: wire.CodeAuthFailed, Message: "bad password"})
				continue
			}
			reply(h.Op, nil)
		case wire.OpMetadata:
			var req wire.MetadataRequest
			if err := req.Decode(body); err != nil {
				return
			}
			_, _ = c.Write(wire.AppendFrame(nil, wire.OpPing, wire.FlagResponse, h.Corr+1000, nil)) // stray
			resp, eb := answer(req)
			if eb != nil {
				fail(*eb)
				continue
			}
			reply(h.Op, resp.AppendTo(nil))
		}
	}
}

func clusterAnswer(self, leader uint32, addrs []string) wire.MetadataResponse {
	md := wire.MetadataResponse{Cluster: true, NodeID: self, Topics: []wire.TopicMetadata{{Name: "bench", Kind: wire.KindDurable,
		Partitions: []wire.PartitionMetadata{{ID: 0, Leader: leader, Replicas: []uint32{1, 2, 3}}}}}}
	for i, a := range addrs {
		md.Brokers = append(md.Brokers, wire.BrokerMetadata{NodeID: uint32(i + 1), Addr: a})
	}
	return md
}

// TestRawMetadata: the raw connection logs in, asks METADATA with the cluster flag, skips a
// frame of another correlation id, and reads the leader and its address; ERROR answers come
// back as *wire.Error; a wrong password fails the login.
func TestRawMetadata(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addrs := []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"}
	var asked wire.MetadataRequest
	var mu sync.Mutex
	addr := fakeMetaBroker(t, func(req wire.MetadataRequest) (wire.MetadataResponse, *wire.ErrorBody) {
		mu.Lock()
		asked = req
		mu.Unlock()
		if len(req.Topics) == 1 && req.Topics[0] == "gone" {
			return wire.MetadataResponse{}, &wire.ErrorBody{Code: wire.CodeUnknownTopic, Message: "no such topic"}
		}
		return clusterAnswer(1, 2, addrs), nil
	})
	c, err := dialRaw(ctx, addr, "admin", "pw")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	md, err := c.clusterMetadata("bench")
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if !asked.Cluster || len(asked.Topics) != 1 || asked.Topics[0] != "bench" {
		t.Errorf("request %+v: want the cluster flag and topic bench", asked)
	}
	mu.Unlock()
	id, laddr, err := leaderOf(md, "bench")
	if err != nil || id != 2 || laddr != addrs[1] {
		t.Errorf("leaderOf = %d %q %v, want 2 %s", id, laddr, err, addrs[1])
	}
	if id, _, err := leaderOf(md, "other"); id != 0 || err != nil {
		t.Errorf("a topic not in the answer: %d %v, want 0 and no error", id, err)
	}
	if _, err := c.clusterMetadata("gone"); !errors.Is(err, &wire.Error{Code: wire.CodeUnknownTopic}) {
		t.Errorf("ERROR answer: %v, want UNKNOWN_TOPIC", err)
	}
	if _, err := dialRaw(ctx, addr, "admin", "wrong"); !errors.Is(err, &wire.Error{Code: wire.CodeAuthFailed}) {
		t.Errorf("wrong password: %v, want AUTH_FAILED", err)
	}
	// During an election: no leader. A leader missing from the broker list is an error.
	if id, _, err := leaderOf(clusterAnswer(1, 0, addrs), "bench"); id != 0 || err != nil {
		t.Errorf("no leader yet: %d %v", id, err)
	}
	if _, _, err := leaderOf(clusterAnswer(1, 5, addrs), "bench"); err == nil {
		t.Error("leader 5 of a 3-broker list: no error")
	}
}

// TestWaitLeader: the leader is the member that names itself; the others' answers (naming
// it, or no leader yet) are not enough; with nobody naming itself the wait ends with an error.
func TestWaitLeader(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var addrs []string
	var mu sync.Mutex
	calls := 0
	for i := range 3 {
		self := uint32(i + 1)
		addrs = append(addrs, fakeMetaBroker(t, func(wire.MetadataRequest) (wire.MetadataResponse, *wire.ErrorBody) {
			mu.Lock()
			defer mu.Unlock()
			calls++
			leader := uint32(3) // members 1 and 2 say 3 leads from the start
			if self == 3 && calls < 10 {
				leader = 0 // member 3 learns it leads only later
			}
			return clusterAnswer(self, leader, addrs), nil
		}))
	}
	li, err := waitLeader(ctx, addrs, "admin", "pw", "bench", 30*time.Second)
	if err != nil || li != 2 {
		t.Fatalf("waitLeader = %d %v, want 2", li, err)
	}
	lone := fakeMetaBroker(t, func(wire.MetadataRequest) (wire.MetadataResponse, *wire.ErrorBody) {
		return clusterAnswer(1, 0, []string{"127.0.0.1:1"}), nil
	})
	if _, err := waitLeader(ctx, []string{lone}, "admin", "pw", "bench", 300*time.Millisecond); err == nil || !strings.Contains(err.Error(), "no leader") {
		t.Errorf("no leader ever: %v", err)
	}
}

// TestStreamLeader: the stream leader's server name n<i> gives member i-1; anything else is
// an error.
func TestStreamLeader(t *testing.T) {
	for _, tc := range []struct {
		info string
		want int
		ok   bool
	}{
		{`{"config":{"name":"benchstream"},"cluster":{"name":"bench","leader":"n2","replicas":[{"name":"n1"},{"name":"n3"}]}}`, 1, true},
		{`{"cluster":{"leader":"n1"}}`, 0, true},
		{`{"cluster":{"leader":"n3"}}`, 2, true},
		{`{"cluster":{"leader":""}}`, -1, false},
		{`{"cluster":{"leader":"n4"}}`, -1, false},
		{`{"cluster":{"leader":"other"}}`, -1, false},
		{`not json`, -1, false},
	} {
		got, err := streamLeader(tc.info)
		if got != tc.want || (err == nil) != tc.ok {
			t.Errorf("streamLeader(%s) = %d, %v; want %d (ok %v)", tc.info, got, err, tc.want, tc.ok)
		}
	}
}

// TestSetLeader: the leader's role and the followers' in member order; srv is the leader.
func TestSetLeader(t *testing.T) {
	b := &brokerRun{members: []*server{{role: "server"}, {role: "server"}, {role: "server"}}}
	b.setLeader(1)
	if b.srv != b.members[1] || b.members[0].role != "follower1" || b.members[1].role != "leader" || b.members[2].role != "follower2" {
		t.Errorf("roles %s %s %s", b.members[0].role, b.members[1].role, b.members[2].role)
	}
	s := sample{"cpu_gb_total": 3, "cpu_gb_leader": 1.25, "cpu_gb_follower1": 0.5, "cpu_gb_follower2": 0.75, "cpu_gb_pub": 0.5, "pub": 9}
	s.deriveCPU()
	if s["cpu_gb_followers"] != 1.25 || s["cpu_gb_busiest"] != 1.25 {
		t.Errorf("followers %v, busiest %v; want 1.25, 1.25", s["cpu_gb_followers"], s["cpu_gb_busiest"])
	}
	s["cpu_gb_follower2"] = 2
	s.deriveCPU() // again, after a change: the aggregates are not counted as processes
	if s["cpu_gb_followers"] != 2.5 || s["cpu_gb_busiest"] != 2 {
		t.Errorf("again: followers %v, busiest %v; want 2.5, 2", s["cpu_gb_followers"], s["cpu_gb_busiest"])
	}
	single := sample{"cpu_gb_total": 2, "cpu_gb_broker": 0.8, "cpu_gb_pub": 1.2}
	single.deriveCPU()
	if _, ok := single["cpu_gb_followers"]; ok || single["cpu_gb_busiest"] != 1.2 {
		t.Errorf("one broker: %v", single)
	}
	none := sample{"pub": 1}
	if none.deriveCPU(); len(none) != 1 {
		t.Errorf("no CPU figures: %v", none)
	}
	if k := cpuGBKey("server"); k != "cpu_gb_broker" {
		t.Errorf("cpuGBKey(server) = %s", k)
	}
}

// TestDocSections: a run of the replicated cases alone rewrites their section only; a run of
// both rewrites both; a missing section is appended.
func TestDocSections(t *testing.T) {
	path := filepath.Join(t.TempDir(), "PERF.md")
	orig := "# t\n\n" + docBegin + "\nold main\n" + docEnd + "\n\nmiddle\n\n" + docReplBegin + "\nold repl\n" + docReplEnd + "\n\nend\n"
	if err := os.WriteFile(path, []byte(orig), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Rounds: 1, Cases: []string{"replicated"}, SustainBytes: 2e9, LatencyRate: 50000, LatencyDuration: time.Second, LatencyLinger: "-1ms"}
	repl := (&runner{cfg: cfg}).cases()
	main := caseDef{id: "transient-100", family: "transient", title: "transient 100 B", rows: []rowDef{{key: "sub", label: "msgs/s"}}}
	read := func() string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	rep := newReport(cfg, repl)
	if err := rep.updateDoc(path, docSections); err != nil {
		t.Fatal(err)
	}
	s := read()
	if !strings.Contains(s, "\nold main\n") || strings.Contains(s, "old repl") || !strings.Contains(s, "| replicated x3, durable 100 B, acks 1") ||
		!strings.HasSuffix(s, docReplEnd+"\n\nend\n") || !strings.Contains(s, "\n\nmiddle\n\n"+docReplBegin) {
		t.Errorf("replicated run:\n%s", s)
	}
	rep = newReport(cfg, append([]caseDef{main}, repl...))
	if err := rep.updateDoc(path, docSections); err != nil {
		t.Fatal(err)
	}
	s = read()
	if strings.Contains(s, "old main") || !strings.Contains(s, "| transient 100 B | msgs/s |") || strings.Contains(s[:strings.Index(s, docEnd)], "replicated x3") {
		t.Errorf("both sections:\n%s", s)
	}
	if err := os.WriteFile(path, []byte("# t\n\n"+docBegin+"\nx\n"+docEnd+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := newReport(cfg, repl).updateDoc(path, docSections); err != nil {
		t.Fatal(err)
	}
	if s := read(); !strings.Contains(s, docEnd+"\n\n"+docReplBegin) || !strings.HasSuffix(s, docReplEnd+"\n") || !strings.Contains(s, "\nx\n") {
		t.Errorf("appended section:\n%s", s)
	}
}

// TestDocSectionsSplit: with a file for the replicated section, each section goes to its
// own file, and a run without a file's cases leaves that file alone.
func TestDocSectionsSplit(t *testing.T) {
	dir := t.TempDir()
	mainPath, replPath := filepath.Join(dir, "PERF.md"), filepath.Join(dir, "REPL.md")
	mainOrig := "# m\n\n" + docBegin + "\nold main\n" + docEnd + "\n"
	replOrig := "# r\n\n" + docReplBegin + "\nold repl\n" + docReplEnd + "\n"
	for p, s := range map[string]string{mainPath: mainOrig, replPath: replOrig} {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	cfg := Config{Rounds: 1, Cases: []string{"replicated"}, SustainBytes: 2e9, LatencyRate: 50000, LatencyDuration: time.Second, LatencyLinger: "-1ms"}
	repl := (&runner{cfg: cfg}).cases()
	if err := newReport(cfg, repl).updateDocs(mainPath, replPath); err != nil {
		t.Fatal(err)
	}
	if m, r := read(mainPath), read(replPath); m != mainOrig || strings.Contains(r, "old repl") || !strings.Contains(r, "| replicated x3, durable 100 B, acks 1") {
		t.Errorf("replicated run:\nmain:\n%s\nrepl:\n%s", m, r)
	}
	main := caseDef{id: "transient-100", family: "transient", title: "transient 100 B", rows: []rowDef{{key: "sub", label: "msgs/s"}}}
	if err := newReport(cfg, append([]caseDef{main}, repl...)).updateDocs(mainPath, replPath); err != nil {
		t.Fatal(err)
	}
	if m, r := read(mainPath), read(replPath); strings.Contains(m, "old main") || strings.Contains(m, "replicated x3") || strings.Contains(m, docReplBegin) ||
		!strings.Contains(m, "| transient 100 B | msgs/s |") || strings.Contains(r, docBegin) {
		t.Errorf("both:\nmain:\n%s\nrepl:\n%s", m, r)
	}
}

// TestFreePorts: the ports are distinct and free.
func TestFreePorts(t *testing.T) {
	ports, err := freePorts(9)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] || p == 0 {
			t.Fatalf("ports %v: repeated or zero", ports)
		}
		seen[p] = true
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", fmt.Sprint(p)))
		if err != nil {
			t.Fatalf("port %d not free: %v", p, err)
		}
		ln.Close()
	}
}
