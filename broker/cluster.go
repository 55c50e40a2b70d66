package broker

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	cmeta "github.com/lightq/lightq/cluster/meta"
	cpart "github.com/lightq/lightq/cluster/partition"
	"github.com/lightq/lightq/cluster/replica"
	"github.com/lightq/lightq/cluster/transport"
)

// clusterNode is what a broker with cluster settings runs beside its listeners: the
// transport on the cluster port, the router that hands each Raft message to its group, the
// metadata group (cluster/meta) and the replicas of the partitions placed on this broker
// (cluster/partition, opened by reconcile).
//
// Concurrency: reconcile runs on the node's goroutine only (run), one pass at a time, and
// changes the topic table under Server.adminMu like any topic change. mu guards applied,
// which CREATE_TOPIC and DELETE_TOPIC wait on (waitApplied) from the auth pool.
type clusterNode struct {
	srv    *Server
	id     uint64
	log    zerolog.Logger
	tr     *transport.Transport
	router *replica.Router
	meta   *cmeta.Store

	mu      sync.Mutex
	cond    *sync.Cond
	applied uint64 // the metadata index the topic table reflects

	// offsets is the cluster's offsets topic as served here (coordinator.go); nil until the
	// metadata has it. Written by reconcile, read anywhere.
	offsets atomic.Pointer[offsetsTable]
	purge   chan struct{} // cap 1: purge the offsets of deleted topics (purgeOffsets)
	purging purgeSet

	// peers are the cluster addresses syncPeers gave the transport, by node (the node
	// goroutine's).
	peers map[uint64]string
	mover *mover // drives the moves of the partitions led here (clustermove.go)
	// segs are the partition replicas held here by Raft group, whose segment logs the
	// transport serves to followers catching up from whole segments (set by openReplica,
	// removed by closeReplica; read by the transport's goroutines).
	segs sync.Map // uint64 -> *cpart.Partition
	// scrub is the rate the replicas' scrubs share (nil: none).
	scrub *cpart.ScrubRate

	stop      chan struct{}
	done      chan struct{} // run ended
	announced chan struct{} // runAnnounce ended
}

// metaDir is where the metadata group keeps its log and snapshots.
func metaDir(dataDir string) string { return filepath.Join(dataDir, "cluster", "meta") }

// startCluster opens the transport and the metadata group and starts reconciling. It runs
// in Start before the client listeners, so a broker that answers clients already holds the
// topics the cluster had when it stopped (as far as its metadata replica knows them).
func (s *Server) startCluster() error {
	cc := &s.cfg.Cluster
	n := &clusterNode{srv: s, id: uint64(s.nodeID()), router: replica.NewRouter(), peers: map[uint64]string{},
		log: s.log.With().Str("component", "cluster").Logger(), purge: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{}), announced: make(chan struct{})}
	n.cond = sync.NewCond(&n.mu)
	switch rate := cc.ScrubBytesPerSecond; {
	case rate == 0:
		n.scrub = cpart.NewScrubRate(cpart.DefaultScrubBytesPerSecond)
	case rate > 0:
		n.scrub = cpart.NewScrubRate(rate)
	}
	listen := cc.Listen
	if listen == "" {
		listen = cc.Peers[n.id]
	}
	tr, err := transport.New(transport.Config{
		NodeID: n.id, Listen: listen, Secret: cc.Secret,
		Handler: n.router.Handle, Unreachable: n.router.Unreachable,
		Logf:     func(f string, a ...any) { n.log.Debug().Msgf(f, a...) },
		Segments: n.segmentSource,
	})
	if err != nil {
		return fmt.Errorf("cluster port %s: %w", listen, err)
	}
	n.tr = tr
	peers := make([]uint64, 0, len(cc.Peers))
	for id, addr := range cc.Peers {
		peers = append(peers, id)
		if id != n.id {
			tr.SetPeer(id, addr)
		}
	}
	slices.Sort(peers)
	store, err := cmeta.Open(cmeta.Config{Dir: metaDir(s.cfg.DataDir), NodeID: n.id, Peers: peers, Join: cc.Join, Sender: tr,
		Logf: func(f string, a ...any) { n.log.Info().Str("group", "meta").Msgf(f, a...) }})
	if err != nil {
		_ = tr.Close()
		return fmt.Errorf("cluster metadata: %w", err)
	}
	n.meta = store
	n.router.Add(cmeta.Group, store.Replica())
	select { // the metadata this broker had: its topics are served from the start
	case <-store.Replayed():
	case <-time.After(metaTimeout):
		n.log.Warn().Dur("waited", metaTimeout).Msg("the metadata replica has not replayed its log yet; starting with what it applied")
	}
	s.cluster = n
	s.pids.inCluster(s.nodeID())
	watch := store.Watch()
	n.reconcile() // what the metadata replica held at its last stop
	n.mover = newMover(n)
	go n.run(watch)
	go n.runAnnounce()
	go n.mover.run()
	ev := n.log.Info().Str("cluster_addr", tr.Addr().String()).Uint64("node_id", n.id).Str("peers", cc.describePeers())
	if cc.Join && len(store.Members().Voters) == 0 {
		ev.Msg("cluster member started, waiting to be added to the cluster (ADD_BROKER)")
	} else {
		ev.Msg("cluster member started")
	}
	return nil
}

// run reconciles the topic table with the metadata whenever it changes, and purges the
// committed offsets of deleted topics. watch was taken before the last reconcile, so that no
// change falls between the two.
func (n *clusterNode) run(watch <-chan struct{}) {
	defer close(n.done)
	for {
		select {
		case <-n.stop:
			return
		case <-watch:
			watch = n.meta.Watch()
			n.reconcile()
			n.purgeOffsets()
		case <-n.purge:
			n.purgeOffsets()
		}
	}
}

// runAnnounce announces this broker's addresses until the metadata has them (a broker that
// joins: once it is added), then sees that the offsets topic exists. Its own goroutine: a
// proposal waits for the metadata's leader.
func (n *clusterNode) runAnnounce() {
	defer close(n.announced)
	retry := time.NewTimer(0)
	defer retry.Stop()
	announced := false
	for {
		select {
		case <-n.stop:
			return
		case <-retry.C:
		}
		if !announced {
			announced = n.announce()
		}
		if announced && n.ensureOffsetsTopic() {
			return
		}
		retry.Reset(500 * time.Millisecond)
	}
}

// announce proposes this broker's addresses (AddBroker) unless the metadata has them, and
// reports whether it has them now.
func (n *clusterNode) announce() bool {
	want := cmeta.AddBroker{ID: n.id, ClientAddr: n.srv.advertisedAddr(), TLSAddr: n.srv.advertisedTLSAddr(), ClusterAddr: n.clusterAddr()}
	if b, ok := n.meta.State().Broker(n.id); ok && b.ClientAddr == want.ClientAddr && b.TLSAddr == want.TLSAddr && b.ClusterAddr == want.ClusterAddr {
		return true
	}
	ctx, cancel := n.stopContext(2 * time.Second)
	defer cancel()
	if _, err := n.meta.Propose(ctx, &want); err != nil {
		n.log.Debug().Err(err).Msg("announcing this broker to the cluster; will retry")
		return false
	}
	n.log.Info().Str("addr", want.ClientAddr).Msg("this broker's addresses are in the cluster metadata")
	return true
}

// stopContext is a context that ends after d or when the node stops, for the proposals of
// the node's own goroutines (which close waits for).
func (n *clusterNode) stopContext(d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	go func() {
		select {
		case <-n.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// clusterAddr is where the other brokers reach this one: its cluster-peers entry, or the
// port the cluster listener got when that entry asks for any (port 0, as tests do).
func (n *clusterNode) clusterAddr() string {
	addr := n.srv.cfg.Cluster.Peers[n.id]
	if _, port, err := net.SplitHostPort(addr); err == nil && port == "0" {
		return n.tr.Addr().String()
	}
	return addr
}

// waitApplied waits until the topic table reflects the metadata up to index, or ctx ends.
func (n *clusterNode) waitApplied(ctx context.Context, index uint64) error {
	stop := context.AfterFunc(ctx, func() {
		n.mu.Lock()
		n.cond.Broadcast()
		n.mu.Unlock()
	})
	defer stop()
	n.mu.Lock()
	defer n.mu.Unlock()
	for n.applied < index {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		n.cond.Wait()
	}
	return nil
}

func (n *clusterNode) setApplied(index uint64) {
	n.mu.Lock()
	n.applied = max(n.applied, index)
	n.cond.Broadcast()
	n.mu.Unlock()
}

// close stops reconciling, the offsets replicas and the metadata group. The partitions'
// replicas are closed with their topics (Server.closeTopics).
func (n *clusterNode) close() {
	close(n.stop)
	<-n.done
	<-n.announced
	<-n.mover.done
	n.closeOffsets()
	if err := n.meta.Close(); err != nil {
		n.log.Warn().Err(err).Msg("closing the cluster metadata")
	}
}

// closeTransport closes the cluster port, after the replicas stopped.
func (n *clusterNode) closeTransport() {
	if err := n.tr.Close(); err != nil {
		n.log.Warn().Err(err).Msg("closing the cluster port")
	}
}

// ClusterAddr is the address of the cluster port (with the real port when the cluster
// settings said port 0), or "" without cluster settings or before Start. Safe for
// concurrent use after Start returned.
func (s *Server) ClusterAddr() string {
	if s.cluster == nil {
		return ""
	}
	return s.cluster.tr.Addr().String()
}

// advertisedAddr is the client address METADATA gives for this broker.
func (s *Server) advertisedAddr() string {
	if a := s.cfg.Cluster.AdvertiseAddr; a != "" {
		return a
	}
	return advertisable(s.Addr(), s.cfg.Cluster.Peers[uint64(s.nodeID())])
}

// advertisedTLSAddr is the TLS client address METADATA gives for this broker ("" without a
// TLS listener).
func (s *Server) advertisedTLSAddr() string {
	if a := s.cfg.Cluster.AdvertiseTLSAddr; a != "" {
		return a
	}
	if a := s.TLSAddr(); a != "" {
		return advertisable(a, s.cfg.Cluster.Peers[uint64(s.nodeID())])
	}
	return ""
}

// advertisable is listen with the host of clusterAddr when listen names a wildcard host.
func advertisable(listen, clusterAddr string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		if ch, _, err := net.SplitHostPort(clusterAddr); err == nil {
			return net.JoinHostPort(ch, port)
		}
	}
	return listen
}

// brokerList is the metadata's brokers for METADATA, in node id order.
func brokerList(st *cmeta.State) []cmeta.Broker {
	bs := st.Brokers()
	sort.Slice(bs, func(i, j int) bool { return bs[i].ID < bs[j].ID })
	return bs
}

// segmentSource is the segment log of the partition replica of group held here, for the
// transport's segment streams; nil when none is.
func (n *clusterNode) segmentSource(group uint64) transport.SegmentSource {
	if v, ok := n.segs.Load(group); ok {
		return v.(*cpart.Partition).SegmentSource()
	}
	return nil
}
