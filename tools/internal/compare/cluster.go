package compare

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lightq/lightq/wire"

	lq "github.com/lightq/lightq/client"
)

// Clusters of three brokers on this machine, for the replicated cases (replicated.go): three
// lightq processes with cluster settings, or three nats-server processes with JetStream and
// routes between them. Each member has its own data directory under the run's one, and its
// own ports; all of them are stopped, and the directory removed, after the measurement.

// clusterSize is the brokers of a cluster and the replication factor of its topic or stream.
const clusterSize = 3

// clusterSecret is the LightQ cluster's shared secret (a throwaway, as the admin password).
const clusterSecret = "compare-cluster-secret"

// lqbench's default topic credentials: the replicated topic is created by the tool with them
// so that lqbench, pointed at the leader afterwards, finds the topic it would have made.
const (
	lqbenchUser     = "lqbench"
	lqbenchPassword = "lqbench-password"
)

// electionWait bounds the wait for a partition's or a stream's leader.
const electionWait = 30 * time.Second

// startLightQCluster starts clusterSize lightq brokers forming one cluster, creates the
// durable topic "bench" with one partition, replication.factor 3 and opts, and waits until
// its leader has been elected: the returned run's srv is the leader (role "leader"), the
// others are "follower1" and "follower2", and conn points the clients at the leader.
func (r *runner) startLightQCluster(ctx context.Context, opts []wire.Option) (*brokerRun, error) {
	dir := r.tempDir("lightq-cluster")
	b := &brokerRun{dir: dir}
	addrs := make([]string, clusterSize)
	peers := make([]string, clusterSize)
	free, err := freePorts(2 * clusterSize) // a client port and a cluster port each
	if err != nil {
		return nil, err
	}
	ports := free[:clusterSize]
	for i := range clusterSize {
		addrs[i] = fmt.Sprintf("127.0.0.1:%d", ports[i])
		peers[i] = fmt.Sprintf("%d=127.0.0.1:%d", i+1, free[clusterSize+i])
	}
	env := []string{"LIGHTQ_ADMIN_PASSWORD=" + adminPassword, "LIGHTQ_CLUSTER_SECRET=" + clusterSecret}
	for i := range clusterSize {
		d := filepath.Join(dir, fmt.Sprintf("node%d", i+1))
		args := []string{"--addr", addrs[i], "--data-dir", d, "--log-level", "warn", "--hash-params", "m=64,t=1,p=1",
			"--node-id", fmt.Sprint(i + 1), "--cluster-peers", strings.Join(peers, ",")}
		srv, err := startServer(fmt.Sprintf("lightq node %d", i+1), env, filepath.Join(r.bin, "lightq"), args...)
		if err != nil {
			_ = b.stop()
			return nil, err
		}
		b.members = append(b.members, srv)
	}
	b.srv = b.members[0]
	for i, srv := range b.members {
		if err := waitPort(ctx, srv, ports[i], 15*time.Second); err != nil {
			_ = b.stop()
			return nil, err
		}
	}
	fail := func(err error) (*brokerRun, error) {
		_ = b.stop()
		return nil, err
	}
	if err := createReplicatedTopic(ctx, addrs[0], opts); err != nil {
		return fail(err)
	}
	li, err := waitLeader(ctx, addrs, "admin", adminPassword, "bench", electionWait)
	if err != nil {
		return fail(err)
	}
	b.setLeader(li)
	b.addr = addrs[li]
	b.conn = []string{"-b", addrs[li]}
	return b, nil
}

// setLeader names member li the leader and the others follower1, follower2 in order.
func (b *brokerRun) setLeader(li int) {
	n := 0
	for i, s := range b.members {
		if i == li {
			s.role = "leader"
			continue
		}
		n++
		s.role = fmt.Sprintf("follower%d", n)
	}
	b.srv = b.members[li]
}

// createReplicatedTopic creates "bench" (durable, one partition, replication.factor 3 and
// opts) through the broker at addr, retrying while the cluster's metadata group has no
// leader yet.
func createReplicatedTopic(ctx context.Context, addr string, opts []wire.Option) error {
	ctx, cancel := context.WithTimeout(ctx, electionWait)
	defer cancel()
	tc := lq.TopicConfig{Name: "bench", Kind: wire.KindDurable, Partitions: 1, User: lqbenchUser, Password: lqbenchPassword,
		Options: append([]wire.Option{{Key: wire.OptionReplicationFactor, Value: fmt.Sprint(clusterSize)}}, opts...)}
	for {
		err := func() error {
			c, err := lq.Dial(ctx, addr, lq.Options{User: "admin", Password: adminPassword, ClientName: "compare"})
			if err != nil {
				return err
			}
			defer c.Close()
			return c.CreateTopic(ctx, tc)
		}()
		if err == nil || errors.Is(err, &wire.Error{Code: wire.CodeTopicExists}) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("creating the replicated topic on %s: %w", addr, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// startNATSCluster starts clusterSize nats-server processes with JetStream (each its own
// store), a cluster name and routes to each other, as a NATS deployment of three would run,
// and waits until JetStream's meta group has a leader. syncInterval "" keeps the server
// default (2 min). The clients' conn is member 0 until setupNATSStream finds the stream's
// leader.
func (r *runner) startNATSCluster(ctx context.Context, syncInterval string) (*brokerRun, error) {
	dir := r.tempDir("nats-cluster")
	b := &brokerRun{dir: dir}
	type node struct{ port, mon, route int }
	nodes := make([]node, clusterSize)
	free, err := freePorts(3 * clusterSize) // client, monitoring and route ports
	if err != nil {
		return nil, err
	}
	var routes []string
	for i := range nodes {
		nodes[i] = node{port: free[3*i], mon: free[3*i+1], route: free[3*i+2]}
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", nodes[i].route))
	}
	for i, n := range nodes {
		d := filepath.Join(dir, fmt.Sprintf("n%d", i+1))
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
		conf := fmt.Sprintf("server_name: n%d\nlisten: 127.0.0.1:%d\nhttp: 127.0.0.1:%d\n", i+1, n.port, n.mon)
		conf += fmt.Sprintf("cluster {\n  name: bench\n  listen: 127.0.0.1:%d\n  routes: [%s]\n}\n", n.route, strings.Join(routes, ", "))
		conf += fmt.Sprintf("jetstream {\n  store_dir: %q\n", filepath.Join(d, "store"))
		if syncInterval != "" {
			conf += fmt.Sprintf("  sync_interval: %q\n", syncInterval)
		}
		conf += "}\n"
		path := filepath.Join(d, "nats.conf")
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			_ = b.stop()
			return nil, err
		}
		srv, err := startServer(fmt.Sprintf("nats-server n%d", i+1), nil, r.natsServerPath, "-c", path)
		if err != nil {
			_ = b.stop()
			return nil, err
		}
		b.members = append(b.members, srv)
		b.urls = append(b.urls, fmt.Sprintf("nats://127.0.0.1:%d", n.port))
	}
	b.srv = b.members[0]
	for i, n := range nodes {
		for _, p := range []int{n.port, n.mon} {
			if err := waitPort(ctx, b.members[i], p, 15*time.Second); err != nil {
				_ = b.stop()
				return nil, err
			}
		}
	}
	b.addr, b.mon = b.urls[0], fmt.Sprintf("http://127.0.0.1:%d", nodes[0].mon)
	b.conn = []string{"-s", b.urls[0]}
	if err := waitJSMeta(ctx, b.mon, electionWait); err != nil {
		_ = b.stop()
		return nil, err
	}
	return b, nil
}

// waitJSMeta polls /jsz until JetStream's meta group of the cluster has a leader and all
// clusterSize peers.
func waitJSMeta(ctx context.Context, mon string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	hc := &http.Client{Timeout: 2 * time.Second}
	var last string
	for {
		resp, err := hc.Get(mon + "/jsz")
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			var jsz struct {
				Meta struct {
					Leader   string            `json:"leader"`
					Size     int               `json:"cluster_size"`
					Replicas []json.RawMessage `json:"replicas"`
				} `json:"meta_cluster"`
			}
			if json.Unmarshal(body, &jsz) == nil && jsz.Meta.Leader != "" && len(jsz.Meta.Replicas)+1 >= clusterSize {
				return nil
			}
			last = tail(string(body), 300)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("JetStream cluster: no meta leader with %d peers after %v: %s", clusterSize, timeout, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// setupNATSStream creates the benchmark stream with clusterSize replicas the way the
// measurement's `nats bench js pub --create` runs will find it (one message published, then
// purged), retrying while JetStream is not ready, and points the clients at the stream's
// leader: its server is the one that stores first and answers the publish acks, and a
// client of another server would add a route hop to every publish (NATS's best case, as
// LightQ's clients go to the partition's leader). Not part of the measurement.
func (r *runner) setupNATSStream(ctx context.Context, b *brokerRun, size int) error {
	run := func(args ...string) (string, error) {
		c := newClient(ctx, r.cfg.RunTimeout, nil, r.natsCLIPath, append(append([]string{"--no-context"}, b.conn...), args...)...)
		err := c.run()
		return c.stdout.String(), err
	}
	deadline := time.Now().Add(electionWait)
	for {
		_, err := run(r.natsJSPubArgs(size, 1, clusterSize)...)
		if err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("creating the R%d stream: %w", clusterSize, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	if _, err := run("stream", "purge", "benchstream", "-f"); err != nil {
		return err
	}
	out, err := run("stream", "info", "benchstream", "--json")
	if err != nil {
		return err
	}
	li, err := streamLeader(out)
	if err != nil {
		return err
	}
	b.setLeader(li)
	b.addr = b.urls[li]
	b.conn = []string{"-s", b.urls[li]}
	return nil
}

// streamLeader reads the stream leader's member index from `nats stream info --json`: its
// server name is n<index+1>.
func streamLeader(info string) (int, error) {
	var si struct {
		Cluster struct {
			Leader string `json:"leader"`
		} `json:"cluster"`
	}
	if err := json.Unmarshal([]byte(info), &si); err != nil {
		return -1, fmt.Errorf("nats stream info: %v: %q", err, tail(info, 300))
	}
	var n int
	if _, err := fmt.Sscanf(si.Cluster.Leader, "n%d", &n); err != nil || n < 1 || n > clusterSize {
		return -1, fmt.Errorf("nats stream info: leader %q is none of n1..n%d", si.Cluster.Leader, clusterSize)
	}
	return n - 1, nil
}
