package lqcat

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lightq/lightq/broker"
	"github.com/lightq/lightq/broker/brokertest"
)

// clusterJSON is cluster status -J's output, as a script reads it.
type clusterJSON struct {
	Node    uint32 `json:"node"`
	Brokers []struct {
		Node    uint32 `json:"node"`
		Addr    string `json:"addr"`
		Reached bool   `json:"reached"`
	} `json:"brokers"`
	Partitions []struct {
		Topic         string `json:"topic"`
		Partition     uint32 `json:"partition"`
		View          string `json:"view"`
		FromNode      uint32 `json:"from_node"`
		Leader        uint32 `json:"leader"`
		HighWatermark int64  `json:"high_watermark"`
		Replicas      []struct {
			Node   uint32 `json:"node"`
			Lag    int64  `json:"lag"`
			State  string `json:"state"`
			Active bool   `json:"active"`
		} `json:"replicas"`
	} `json:"partitions"`
}

// until reruns lqcat every 50 ms until check passes on its result (returns ""), and fails
// with what check last said after 30 s.
func (e *env) until(what string, check func(r result) string, args ...string) result {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := e.run("", args...)
		why := check(r)
		if why == "" {
			return r
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("lqcat %q: still not %s after 30 s: %s\nstdout: %s\nstderr: %s", args, what, why, r.out, r.err)
		}
		<-time.After(50 * time.Millisecond)
	}
}

func decodeCluster(r result) (clusterJSON, string) {
	var v clusterJSON
	if err := json.Unmarshal([]byte(r.out), &v); err != nil {
		return v, fmt.Sprintf("exit %d, output not JSON: %v", r.code, err)
	}
	return v, ""
}

// TestClusterStatusE2E: lqcat cluster status against a real 3-broker cluster in this
// process. Once the cluster is quiet, every partition shows its leader's view (from the
// leader itself), three replicas with lag 0, replicating and active, and lqcat exits 0.
// With a follower stopped and messages produced, that broker is listed as not asked, its
// replica lags by what was produced and is inactive, and lqcat exits 1; once it is back,
// its lag returns to 0. A broker without cluster settings is refused with exit 7.
func TestClusterStatusE2E(t *testing.T) {
	c := brokertest.StartCluster(t, 3, func(cfg *broker.Config) {
		cfg.AdminUser, cfg.AdminPassword = "admin", adminPass
		cfg.ShutdownDrain = 200 * time.Millisecond
	})
	addrs := c.Addrs()
	e := &env{t: t, srv: c.Brokers[0], addr: addrs[0], vars: map[string]string{
		"LIGHTQ_BROKER": addrs[0], "LIGHTQ_USER": userName, "LIGHTQ_PASSWORD": userPass, "LIGHTQ_ADMIN_PASSWORD": adminPass,
	}}
	admin := e.admin()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, bs, err := admin.ClusterBrokers(context.Background()); err == nil && len(bs) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the seed broker does not list the three brokers after 30 s")
		}
		<-time.After(20 * time.Millisecond)
	}
	e.topic("orders", "durable", 2, "-X", "replication.factor=3", "--user", userName, "--password", userPass)

	caughtUp := func(r result) string {
		v, why := decodeCluster(r)
		if why != "" || r.code != 0 {
			return fmt.Sprintf("exit %d %s", r.code, why)
		}
		if len(v.Brokers) != 3 || len(v.Partitions) != 2 {
			return fmt.Sprintf("%d brokers, %d partitions", len(v.Brokers), len(v.Partitions))
		}
		for _, p := range v.Partitions {
			if p.Topic != "orders" || p.View != "leader" || p.FromNode != p.Leader || len(p.Replicas) != 3 {
				return fmt.Sprintf("partition %+v", p)
			}
			for _, rs := range p.Replicas {
				if rs.Lag != 0 || !rs.Active || rs.State != "replicate" {
					return fmt.Sprintf("partition %d replica %+v", p.Partition, rs)
				}
			}
		}
		return ""
	}
	r := e.until("caught up", caughtUp, "cluster", "status", "-J")
	v, _ := decodeCluster(r)
	leader0 := int(v.Partitions[0].Leader) - 1

	text := e.ok("", "cluster", "status")
	for _, re := range []string{
		`(?m)^Cluster status \(from broker ` + regexp.QuoteMeta(addrs[0]) + `, node 1\):$`,
		`(?m)^ 3 brokers:$`,
		`(?m)^ 2 replicated partitions:$`,
		`(?m)^    partition 0: leader node [123], term \d+, commit \d+, high watermark (\d+), log 0\.\.\d+$`,
		`(?m)^      replica 2: match \d+, lag 0, replicate, active`,
	} {
		if !regexp.MustCompile(re).MatchString(text) {
			t.Errorf("cluster status output has no line matching %s:\n%s", re, text)
		}
	}
	if n := strings.Count(text, "lag 0, replicate, active"); n != 6 {
		t.Errorf("%d caught-up replica lines, want 6:\n%s", n, text)
	}
	if got := e.ok("", "cluster", "status", "-t", "orders"); got != text {
		t.Errorf("-t orders differs from every topic's:\n%s\n%s", got, text)
	}

	// A follower of partition 0 stops (not broker 1, which lqcat asks first); 5 messages go
	// to partition 0 without it.
	fi := 1
	if leader0 == 1 {
		fi = 2
	}
	c.Stop(fi)
	e.ok("a\nb\nc\nd\ne\n", "-P", "-b", addrs[leader0], "-t", "orders", "-p", "0")
	e.until("showing the stopped follower", func(r result) string {
		v, why := decodeCluster(r)
		if why != "" || r.code != ExitFailed || !strings.Contains(r.err, fmt.Sprintf("1 of 3 brokers could not be asked: node %d", fi+1)) {
			return fmt.Sprintf("exit %d %s, stderr %q", r.code, why, r.err)
		}
		if v.Brokers[fi].Reached || !v.Brokers[0].Reached || !v.Brokers[3-fi].Reached {
			return fmt.Sprintf("brokers %+v", v.Brokers)
		}
		p := v.Partitions[0]
		if p.View != "leader" || int(p.Leader) != leader0+1 || p.HighWatermark < 5 {
			return fmt.Sprintf("partition 0 %+v", p)
		}
		for _, rs := range p.Replicas {
			stopped := int(rs.Node) == fi+1
			if stopped && (rs.Active || rs.Lag < 5) || !stopped && (!rs.Active || rs.Lag != 0) {
				return fmt.Sprintf("partition 0 replica %+v (node %d stopped)", rs, fi+1)
			}
		}
		return ""
	}, "cluster", "status", "-J")
	text = e.run("", "cluster", "status").out
	if !regexp.MustCompile(fmt.Sprintf(`(?m)^  node %d at \S+: not asked: cannot connect`, fi+1)).MatchString(text) ||
		!regexp.MustCompile(fmt.Sprintf(`(?m)^      replica %d: match \d+, lag [5-9]\d*, \w+, inactive$`, fi+1)).MatchString(text) {
		t.Errorf("with node %d stopped:\n%s", fi+1, text)
	}

	c.Start(fi)
	e.until("caught up again", caughtUp, "cluster", "status", "-J")

	single := brokertest.Start(t, func(cfg *broker.Config) { cfg.AdminUser, cfg.AdminPassword = "admin", adminPass })
	e.expect(ExitUnsupported, "has no cluster settings", "", "cluster", "status", "-b", single.Addr())
	e.expect(ExitUsage, "cluster status takes no arguments", "", "cluster", "status", "orders")
	e.expect(ExitUsage, "cluster lag: want status, membership, add-broker", "", "cluster", "lag")
	e.expect(ExitUnknown, "no topic", "", "cluster", "status", "-t", "missing")
}
