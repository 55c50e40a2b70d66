package brokertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lightq/lightq/broker"
	"github.com/lightq/lightq/internal/proxytest"
)

// ClusterSecret is the cluster secret of StartCluster's and StartMember's brokers.
const ClusterSecret = "brokertest-cluster-secret"

// Cluster is brokers of one cluster in this process. Each cluster port listens on
// 127.0.0.1:0 behind a loopback forwarder whose address is that broker's entry in every
// broker's cluster peers, so no port is reserved before the broker that uses it listens,
// and a broker restarted on a new port keeps its address. Not safe for concurrent use.
type Cluster struct {
	t       testing.TB
	Brokers []*broker.Server // by node id - 1; nil while stopped
	cfgs    []broker.Config
	proxies []*proxytest.Proxy
}

// StartCluster starts n brokers with node ids 1 to n, each with Config changed by mutate
// (may be nil; the cluster settings are set already). They stop when the test ends. It does
// not wait for the metadata group: a test waits for what it needs (METADATA with the
// cluster flag lists a broker once it has announced itself; a topic created before a
// quorum is up is answered REPLICATION_TIMEOUT).
func StartCluster(t testing.TB, n int, mutate func(*broker.Config)) *Cluster {
	t.Helper()
	c := &Cluster{t: t}
	peers := map[uint64]string{}
	for i := 1; i <= n; i++ {
		p := proxytest.Start(t)
		c.proxies = append(c.proxies, p)
		peers[uint64(i)] = p.Addr()
	}
	for i := 1; i <= n; i++ {
		cfg := Config(t)
		cfg.NodeID = uint32(i)
		cfg.Cluster = broker.ClusterConfig{Peers: peers, Listen: "127.0.0.1:0", Secret: []byte(ClusterSecret)}
		if mutate != nil {
			mutate(&cfg)
		}
		c.cfgs = append(c.cfgs, cfg)
		c.Brokers = append(c.Brokers, nil)
		c.Start(i - 1)
	}
	return c
}

// Start starts broker i (node id i+1), again from its data directory after Stop, and points
// its forwarder at its cluster port.
func (c *Cluster) Start(i int) {
	c.t.Helper()
	s := StartWith(c.t, c.cfgs[i])
	c.proxies[i].SetBackend(s.ClusterAddr())
	c.Brokers[i] = s
}

// Stop shuts broker i down (as SIGTERM would); its forwarder refuses connections until it
// starts again.
func (c *Cluster) Stop(i int) {
	c.t.Helper()
	s := c.Brokers[i]
	c.Brokers[i] = nil
	c.proxies[i].SetBackend("")
	c.proxies[i].Cut()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		c.t.Fatalf("broker %d: shutdown: %v", i+1, err)
	}
}

// Addrs are the running brokers' client addresses, by node id - 1 ("" for a stopped one).
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Brokers))
	for i, s := range c.Brokers {
		if s != nil {
			out[i] = s.Addr()
		}
	}
	return out
}

// String names the brokers and their client addresses, for test failures.
func (c *Cluster) String() string {
	return fmt.Sprint(c.Addrs())
}

// PeerProxy is the forwarder in front of broker i's cluster port: a test freezes it
// (proxytest.Proxy.Freeze) so that broker i hears nothing from its peers, and, with a
// forwarder of its own in front of the client port, stands for a broker stopped by SIGSTOP
// (its own messages still leave; a leader that hears no quorum steps down, check-quorum).
func (c *Cluster) PeerProxy(i int) *proxytest.Proxy { return c.proxies[i] }
