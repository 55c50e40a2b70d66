package lqcat

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lightq/lightq/broker"
	"github.com/lightq/lightq/broker/brokertest"
)

// TestClusterMembershipCommands: lqcat cluster against real brokers: add-broker grows a
// cluster of one to three, membership shows them (text and JSON), move --wait moves a replicated partition,
// remove-broker drains a broker and removes it, and refusals exit with their codes.
func TestClusterMembershipCommands(t *testing.T) {
	creds := func(c *broker.Config) {
		c.AdminUser, c.AdminPassword = "admin", adminPass
		c.ShutdownDrain = 200 * time.Millisecond
	}
	b1 := brokertest.StartMember(t, 1, nil, false, creds)
	e := &env{t: t, srv: b1, addr: b1.Addr(), vars: map[string]string{"LIGHTQ_BROKER": b1.Addr(), "LIGHTQ_ADMIN_PASSWORD": adminPass}}
	members := []*broker.Server{b1}
	for id := 2; id <= 3; id++ {
		b := brokertest.StartMember(t, uint32(id), map[uint64]string{1: b1.ClusterAddr()}, true, creds)
		members = append(members, b)
		out := e.ok("", "cluster", "add-broker", fmt.Sprint(id), "--addr", b.Addr(), "--cluster-addr", b.ClusterAddr())
		if !strings.Contains(out, fmt.Sprintf("added broker %d", id)) {
			t.Errorf("add-broker %d: %q", id, out)
		}
	}
	status := func(args ...string) jsonMembership {
		t.Helper()
		var st jsonMembership
		if err := json.Unmarshal([]byte(e.ok("", append([]string{"cluster", "membership", "-J"}, args...)...)), &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for st := status(); !allVoters(st, 3); st = status() {
		if time.Now().After(deadline) {
			t.Fatalf("not 3 voters: %+v", st.Brokers)
		}
		<-tick.C
	}
	if out := e.ok("", "cluster", "membership"); !strings.Contains(out, "BROKER  STATE") || !strings.Contains(out, members[2].ClusterAddr()) {
		t.Errorf("cluster membership:\n%s", out)
	}

	e.ok("", "topic", "create", "orders", "--kind", "durable", "--partitions", "1", "-X", "replication.factor=2")
	st := status("-t", "orders")
	if len(st.Partitions) != 1 || len(st.Partitions[0].Replicas) != 2 || st.Partitions[0].Moving {
		t.Fatalf("orders: %+v", st.Partitions)
	}
	from := st.Partitions[0].Replicas
	var spare uint32
	for id := uint32(1); id <= 3; id++ {
		if !slices.Contains(from, id) {
			spare = id
		}
	}
	to := fmt.Sprintf("%d,%d", from[1], spare)
	if out := e.ok("", "cluster", "move", "-t", "orders", "-p", "0", "--replicas", to, "--wait"); !strings.Contains(out, "is moving to brokers "+to) {
		t.Errorf("move: %q", out)
	}
	if st := status("-t", "orders"); fmt.Sprint(st.Partitions[0].Replicas) != fmt.Sprintf("[%d %d]", from[1], spare) || st.Partitions[0].Moving {
		t.Fatalf("after move --wait: %+v", st.Partitions[0])
	}

	e.expect(ExitUnknown, "no broker 9", "", "cluster", "move", "-t", "orders", "-p", "0", "--replicas", "1,9")
	e.expect(ExitUnknown, "orders", "", "cluster", "move", "-t", "orders", "-p", "5", "--replicas", "1,2")
	e.expect(ExitUsage, "listed twice", "", "cluster", "move", "-t", "orders", "-p", "0", "--replicas", "1,1")
	e.expect(ExitUsage, "needs -t TOPIC", "", "cluster", "move", "--replicas", "1")
	// Through a broker other than the spare: a broker cannot remove itself.
	via := members[0]
	if spare == 1 {
		via = members[1]
	}
	e.expect(ExitFailed, "drain it first", "", "-b", via.Addr(), "cluster", "remove-broker", fmt.Sprint(spare), "--no-drain")
	e.expect(ExitUnknown, "no broker 7", "", "cluster", "drain", "7")

	// remove-broker drains the spare (a replica now), waits, and removes it.
	out := e.ok("", "-b", via.Addr(), "cluster", "remove-broker", fmt.Sprint(spare))
	if !strings.Contains(out, fmt.Sprintf("broker %d is draining: ", spare)) || !strings.Contains(out, fmt.Sprintf("removed broker %d", spare)) {
		t.Errorf("remove-broker: %q", out)
	}
	e.vars["LIGHTQ_BROKER"] = via.Addr()
	if st := status(); len(st.Brokers) != 2 || slices.ContainsFunc(st.Brokers, func(b jsonMemberBroker) bool { return b.Node == spare }) {
		t.Fatalf("after remove-broker: %+v", st.Brokers)
	}
}

func allVoters(st jsonMembership, n int) bool {
	v := 0
	for _, b := range st.Brokers {
		if b.Metadata == "voter" {
			v++
		}
	}
	return v == n
}
