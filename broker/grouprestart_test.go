package broker_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/lightq/lightq/broker"
	"github.com/lightq/lightq/broker/brokertest"
	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/internal/proxytest"
	"github.com/lightq/lightq/wire"
)

// A broker without a cluster restarts while member A of a group holds every partition and
// is cut off: A has not heard of the restart and processes its partitions until its local
// session deadline (nine tenths of its session after the last answer of the broker's
// previous run). Member B joins the restarted broker at once. The restarted broker knows
// neither member from before, so it withholds every group's partitions for the longest
// session its previous run granted (recorded in <data dir>/group-sessions): B gets nothing
// until A has stopped. The holdings come from the members' OnAssign and OnRevoke, as in
// TestClusterGroupNoTwoHolders; without the withhold B is given A's partitions about a
// second before A lets them go.
func TestRestartGroupNoTwoHolders(t *testing.T) {
	t.Parallel()
	const session = 2 * time.Second
	dir := t.TempDir()
	cfg := brokertest.Config(t)
	cfg.DataDir = dir
	cfg.Groups.MinSessionTimeout = 100 * time.Millisecond
	srv1 := brokertest.StartWith(t, cfg)
	admin, err := client.Dial(reqCtx(t), srv1.Addr(), client.Options{User: brokertest.AdminUser, Password: brokertest.AdminPassword})
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.CreateTopic(reqCtx(t), client.TopicConfig{Name: cmTopic, Kind: wire.KindDurable, Partitions: cmPartitions, User: cmUser, Password: cmPass}); err != nil {
		t.Fatal(err)
	}
	admin.Close()
	proxy := proxytest.Start(t)
	proxy.SetBackend(srv1.Addr())
	ca, err := client.Dial(reqCtx(t), proxy.Addr(), client.Options{User: cmUser, Password: cmPass})
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close()
	p, err := ca.NewProducer(client.ProducerOptions{Topic: cmTopic})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if err := p.Send(reqCtx(t), &client.Message{Key: fmt.Appendf(nil, "k-%d", i), Value: []byte("v")}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}

	h := &holdings{parts: map[int32][]hold{}}
	ctx, stopConsuming := context.WithCancel(context.Background())
	defer stopConsuming()
	var wg sync.WaitGroup
	defer wg.Wait()
	member := func(i int, c *client.Conn) *client.Consumer {
		k, err := c.NewConsumer(reqCtx(t), client.ConsumerOptions{Topic: cmTopic, Group: "billing", SessionTimeout: session,
			OnError:  func(error) {},
			OnAssign: func(starts map[int32]int64) { h.assign(i, starts) },
			OnRevoke: func(parts []int32, _ bool) map[int32]int64 { h.revoke(i, parts); return nil }})
		if err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = k.Each(ctx, func(*client.Received) error { return nil })
		}()
		return k
	}
	a := member(0, ca)
	defer a.Close()
	eventually(t, "A to hold every partition", func() bool {
		for _, m := range h.holders() {
			if m != 0 {
				return false
			}
		}
		return true
	})

	// A is cut off, and the broker restarts on the same data directory.
	proxy.SetBackend("")
	proxy.Cut()
	if err := srv1.Shutdown(reqCtx(t)); err != nil {
		t.Fatal(err)
	}
	srv2 := brokertest.StartWith(t, cfg)
	restarted := time.Now()
	cb, err := client.Dial(reqCtx(t), srv2.Addr(), client.Options{User: cmUser, Password: cmPass})
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close()
	b := member(1, cb)
	defer b.Close()
	eventually(t, "B to hold every partition", func() bool {
		for _, m := range h.holders() {
			if m != 1 {
				return false
			}
		}
		return true
	})
	given := time.Since(restarted)
	if given < session*9/10 {
		t.Errorf("B was given the partitions %v after the restart, before the %v session of the previous run could have ended", given, session)
	}
	proxy.SetBackend(srv2.Addr()) // A comes back and gets its share
	eventually(t, "A and B to split the partitions", func() bool {
		n := [2]int{}
		for _, m := range h.holders() {
			if m < 0 {
				return false
			}
			n[m]++
		}
		return n[0] == cmPartitions/2 && n[1] == cmPartitions/2
	})
	stopConsuming()
	h.check(t, time.Now(), restarted)
	if t.Failed() {
		for p, hs := range h.parts {
			for _, x := range hs {
				t.Logf("  partition %d: member %d from %s until %s", p, x.member, x.start.Format("15:04:05.000"), x.end.Format("15:04:05.000"))
			}
		}
	}
	t.Logf("restarted at %s; B given the partitions %v later (withheld for the previous run's %v session)", restarted.Format("15:04:05.000"), given.Round(time.Millisecond), session)
}

// The record of the longest session granted: a new data directory withholds nothing; a
// join asking for a longer session than recorded raises the record before it is answered;
// a restart withholds for it and then lowers it to what the new run granted; a data
// directory with durable topics and no record (an older broker's) withholds for the default
// session, a damaged record for the longest session allowed.
func TestRestartGroupSessionRecord(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "group-sessions")
	cfg := brokertest.Config(t)
	cfg.DataDir = dir
	cfg.Groups.MinSessionTimeout = 100 * time.Millisecond
	cfg.Groups.MaxSessionTimeout = 3 * time.Second
	cfg.Groups.SessionTimeout = time.Second
	start := func() *broker.Server {
		t.Helper()
		cfg.Addr = "127.0.0.1:0"
		return brokertest.StartWith(t, cfg)
	}
	recorded := func() string {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil || len(b) != 16 {
			t.Fatalf("%s: %d bytes, %v", path, len(b), err)
		}
		return fmt.Sprintf("%x", b[8:])
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%016x", d.Milliseconds()) }
	// joinGets joins a member on srv with session and reports how long it took to be given
	// a partition (bounded: 10 s), then closes it.
	joinGets := func(srv *broker.Server, session time.Duration) time.Duration {
		t.Helper()
		c, err := client.Dial(reqCtx(t), srv.Addr(), client.Options{User: cmUser, Password: cmPass})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		got := make(chan struct{}, 1)
		begin := time.Now()
		k, err := c.NewConsumer(reqCtx(t), client.ConsumerOptions{Topic: cmTopic, Group: "g", SessionTimeout: session,
			OnAssign: func(map[int32]int64) {
				select {
				case got <- struct{}{}:
				default:
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
		defer k.Close()
		select {
		case <-got:
		case <-time.After(10 * time.Second):
			t.Fatal("no partition within 10 s")
		}
		return time.Since(begin)
	}

	srv := start()
	if got := recorded(); got != ms(0) {
		t.Fatalf("a new data directory records %s, want 0", got)
	}
	admin, err := client.Dial(reqCtx(t), srv.Addr(), client.Options{User: brokertest.AdminUser, Password: brokertest.AdminPassword})
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.CreateTopic(reqCtx(t), client.TopicConfig{Name: cmTopic, Kind: wire.KindDurable, Partitions: 1, User: cmUser, Password: cmPass}); err != nil {
		t.Fatal(err)
	}
	admin.Close()
	if d := joinGets(srv, 1500*time.Millisecond); d > time.Second {
		t.Fatalf("a join on a new data directory waited %v", d)
	}
	if got := recorded(); got != ms(1500*time.Millisecond) {
		t.Fatalf("recorded %s after a join of 1.5 s", got)
	}
	joinGets(srv, 500*time.Millisecond) // shorter: no write
	if got := recorded(); got != ms(1500*time.Millisecond) {
		t.Fatalf("recorded %s after a shorter join", got)
	}
	if err := srv.Shutdown(reqCtx(t)); err != nil {
		t.Fatal(err)
	}

	srv = start()
	if d := joinGets(srv, 200*time.Millisecond); d < 1300*time.Millisecond {
		t.Fatalf("after the restart a member got a partition after %v, within the previous run's 1.5 s session", d)
	}
	eventually(t, "the record lowered to this run's longest session", func() bool { return recorded() == ms(200*time.Millisecond) })
	if err := srv.Shutdown(reqCtx(t)); err != nil {
		t.Fatal(err)
	}

	for _, damage := range []struct {
		what string
		do   func()
		want time.Duration
	}{
		{"missing (an older broker's directory): the default session", func() { _ = os.Remove(path) }, cfg.Groups.SessionTimeout},
		{"damaged: the longest session allowed", func() { _ = os.WriteFile(path, []byte("LQGS not a record"), 0o600) }, cfg.Groups.MaxSessionTimeout},
	} {
		damage.do()
		srv = start()
		if d := joinGets(srv, 200*time.Millisecond); d < damage.want*9/10 || (damage.want < cfg.Groups.MaxSessionTimeout && d >= cfg.Groups.MaxSessionTimeout*9/10) {
			t.Fatalf("record %s: a member got a partition after %v, want %v", damage.what, d, damage.want)
		}
		if err := srv.Shutdown(reqCtx(t)); err != nil {
			t.Fatal(err)
		}
	}
}
