package broker

import (
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"

	"github.com/lightq/lightq/wire"
)

// ClusterConfig makes the broker a member of a cluster (PROTOCOL.md section 16): it holds
// replicas of the partitions of topics with replication.factor > 1 and agrees with its
// peers on the cluster's metadata. Off while Peers is empty.
type ClusterConfig struct {
	// Peers maps every member's node id (this broker's Config.NodeID among them) to its
	// cluster address, the port brokers reach each other on. This broker listens on its own
	// entry's address, unless Listen is set.
	Peers map[uint64]string
	// Listen, when set, is where this broker's cluster port listens instead of its Peers
	// entry (a wildcard address, say, while peers dial a routable one).
	Listen string
	// Secret is shared by every member (at least 16 bytes); a connection that does not prove
	// it is refused (cluster/transport).
	Secret []byte
	// AdvertiseAddr and AdvertiseTLSAddr are the client addresses METADATA gives for this
	// broker; by default its Addr and TLS.Addr when those name a host, else the host of its
	// cluster address with their port.
	AdvertiseAddr, AdvertiseTLSAddr string
	// Join starts a broker that joins a running cluster rather than founding one: its
	// metadata member starts without bootstrapping a group (cluster/meta Config.Join) and
	// waits until an admin adds it (ADD_BROKER, PROTOCOL.md section 16.2). Peers then names
	// the members it can reach and itself. Ignored once the data directory holds the
	// cluster's metadata (a restart).
	Join bool
	// OffsetsPartitions is how many partitions the cluster's offsets topic gets when this
	// broker creates it (the first metadata leader with enough brokers does; the count is
	// the cluster's from then on): each is a Raft group coordinating the consumer groups that
	// hash to it (PROTOCOL.md section 16). Default 8.
	OffsetsPartitions int
	// ScrubBytesPerSecond is how fast this broker's replicas together read their sealed
	// segments again to find damage and repair it from the other replicas
	// (cluster/partition/scrub.go). 0: the default, 8 MiB/s; negative: no scrub.
	ScrubBytesPerSecond int64
}

// Enabled reports whether cluster settings are given.
func (c *ClusterConfig) Enabled() bool { return len(c.Peers) > 0 }

// ParsePeers reads "1=host:port,2=host:port,...": node ids from 1, each once, each address
// host:port.
func ParsePeers(s string) (map[uint64]string, error) {
	peers := map[uint64]string{}
	if strings.TrimSpace(s) == "" {
		return peers, nil
	}
	for _, part := range strings.Split(s, ",") {
		id, addr, ok := strings.Cut(strings.TrimSpace(part), "=")
		n, err := strconv.ParseUint(id, 10, 32)
		switch {
		case !ok:
			return nil, fmt.Errorf("%q: want node-id=host:port", part)
		case err != nil || n == 0:
			return nil, fmt.Errorf("%q: the node id must be an integer from 1 to %d", part, uint32(1<<32-1))
		case peers[n] != "":
			return nil, fmt.Errorf("node %d is listed twice", n)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("node %d: %q is not host:port", n, addr)
		}
		peers[n] = addr
	}
	return peers, nil
}

// validate checks the cluster settings against the broker's node id.
func (c *ClusterConfig) validate(nodeID uint32) error {
	if !c.Enabled() {
		if c.Listen != "" || len(c.Secret) > 0 || c.Join {
			return fmt.Errorf("cluster listen address, secret or join given without cluster peers")
		}
		return nil
	}
	if _, ok := c.Peers[uint64(nodeID)]; !ok || nodeID == 0 {
		return fmt.Errorf("cluster peers %s do not list this broker's node id %d", c.describePeers(), nodeID)
	}
	if c.OffsetsPartitions < 0 || c.OffsetsPartitions > wire.MaxPartitions {
		return fmt.Errorf("cluster offsets partitions %d: want 1-%d (0: the default, %d)", c.OffsetsPartitions, wire.MaxPartitions, defaultOffsetsPartitions)
	}
	if len(c.Secret) < 16 {
		return fmt.Errorf("the cluster secret has %d bytes; want at least 16, the same on every broker", len(c.Secret))
	}
	return nil
}

func (c *ClusterConfig) describePeers() string {
	ids := make([]uint64, 0, len(c.Peers))
	for id := range c.Peers {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	var b strings.Builder
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d=%s", id, c.Peers[id])
	}
	return b.String()
}
