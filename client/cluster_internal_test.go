package client

import (
	"testing"

	"github.com/lightq/lightq/wire"
)

// learn picks the address a broker is dialled at: its plaintext address, or its TLS address
// with Options.TLS (none when the broker has no TLS listener); an empty address of the
// answering broker is the one the client used; and leader finds or makes the node.
func TestLearnAddresses(t *testing.T) {
	md := func() *ClusterMetadata {
		return &ClusterMetadata{
			NodeID: 1,
			Brokers: []wire.BrokerMetadata{
				{NodeID: 1},
				{NodeID: 2, Addr: "b2:7450", TLSAddr: "b2:7451"},
				{NodeID: 3, Addr: "b3:7450"},
			},
			Topics: []wire.TopicMetadata{{Name: "t", Partitions: []wire.PartitionMetadata{
				{ID: 0, Leader: 1, Replicas: []uint32{1, 2, 3}},
				{ID: 1, Leader: 2, Replicas: []uint32{2, 3, 1}},
				{ID: 2, Leader: 3, Replicas: []uint32{3}},
				{ID: 3, Leader: 0, Replicas: []uint32{1, 2}},
			}}},
		}
	}
	for _, tls := range []bool{false, true} {
		c := &Conn{}
		c.opts.setDefaults()
		if tls {
			c.opts.TLS = &TLSOptions{}
		}
		c.boot = c.newNode([]string{"seed:7450"}, nil)
		c.boot.addr = "seed:7450"
		c.nodes = []*node{c.boot}
		l := &link{c: c, n: c.boot}
		c.boot.cur = l
		m := md()
		c.learn(l, m)
		if c.boot.id != 1 || m.Brokers[0].Addr != "seed:7450" {
			t.Fatalf("TLS %v: boot node id %d, answering broker's address %q", tls, c.boot.id, m.Brokers[0].Addr)
		}
		want := map[int32]string{0: "seed:7450", 1: "b2:7450", 2: "b3:7450"}
		if tls {
			want = map[int32]string{0: "seed:7450", 1: "b2:7451"} // b3 has no TLS listener
		}
		for part := range int32(4) {
			n, replicated, ok := c.leader("t", part)
			if wantAddr, known := want[part]; ok != known || ok && n.addrs[0] != wantAddr {
				t.Errorf("TLS %v: partition %d: leader %v (ok %v), want %q", tls, part, n, ok, wantAddr)
			}
			if wantRepl := part != 2; replicated != wantRepl {
				t.Errorf("TLS %v: partition %d: replicated %v", tls, part, replicated)
			}
		}
		if n, _, _ := c.leader("t", 0); n != c.boot {
			t.Errorf("TLS %v: partition 0's leader is not the boot node", tls)
		}
		if _, _, ok := c.leader("other", 0); ok {
			t.Errorf("TLS %v: a leader for a topic not in the view", tls)
		}
		nodes := len(c.nodes)
		c.leader("t", 1)
		if len(c.nodes) != nodes {
			t.Errorf("TLS %v: a second node for broker 2", tls)
		}
	}
}
