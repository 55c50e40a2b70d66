// Package brokertest starts real brokers for the tests of other packages: listening on
// 127.0.0.1 with a free port, a temporary data directory, cheap password hashing, no log
// output, and a shutdown when the test ends. Only tests import it.
//
//	srv := brokertest.Start(t, func(c *broker.Config) { c.AdminPassword = "pw" })
//	conn, err := client.Dial(ctx, srv.Addr(), client.Options{User: "admin", Password: "pw"})
package brokertest

import (
	"bufio"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/lightq/lightq/broker"
	"github.com/lightq/lightq/broker/auth"
)

// Admin credentials a broker from Config gets unless the caller changes them.
const (
	AdminUser     = "admin"
	AdminPassword = "brokertest-admin-password"
)

// Config is a broker configuration for tests.
func Config(t testing.TB) broker.Config {
	cfg := broker.DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	cfg.DataDir = t.TempDir()
	cfg.AdminUser = AdminUser
	cfg.AdminPassword = AdminPassword
	cfg.HashParams = auth.TestParams()
	cfg.Logger = zerolog.Nop()
	cfg.RingBytes = 4 << 20
	cfg.ShutdownDrain = 500 * time.Millisecond
	return cfg
}

// Start starts a broker with Config, changed by mutate (may be nil), and stops it when the
// test ends.
func Start(t testing.TB, mutate func(*broker.Config)) *broker.Server {
	t.Helper()
	cfg := Config(t)
	if mutate != nil {
		mutate(&cfg)
	}
	return StartWith(t, cfg)
}

// StartWith starts a broker with cfg and stops it when the test ends.
func StartWith(t testing.TB, cfg broker.Config) *broker.Server {
	t.Helper()
	srv, err := broker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return srv
}

// StartMember starts broker node of a cluster (PROTOCOL.md section 16.2), changed by mutate
// (may be nil). With join false it founds a cluster of one, with join true it joins a
// running cluster and waits until an admin adds it (ADD_BROKER with its Addr and
// ClusterAddr); peers are the members it can reach (node id to cluster address, another
// broker's Server.ClusterAddr), and its own cluster port listens on a free loopback port.
// The members learn a joining broker's address from the metadata, so no port is chosen in
// advance.
func StartMember(t testing.TB, node uint32, peers map[uint64]string, join bool, mutate func(*broker.Config)) *broker.Server {
	t.Helper()
	cfg := Config(t)
	cfg.NodeID = node
	all := map[uint64]string{uint64(node): "127.0.0.1:0"}
	for id, addr := range peers {
		if id != uint64(node) {
			all[id] = addr
		}
	}
	cfg.Cluster = broker.ClusterConfig{Peers: all, Secret: []byte(ClusterSecret), Join: join}
	if mutate != nil {
		mutate(&cfg)
	}
	return StartWith(t, cfg)
}

// ListenAddr finds the address in the "lightq listening" line of a broker's JSON log, so that
// a test can start a broker process on 127.0.0.1:0 and learn the port it got. (Reserving a
// free port and passing it on loses the port whenever another process takes it meanwhile.)
// It reports false while the line has not been written yet.
func ListenAddr(log string) (string, bool) {
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var line struct{ Message, Addr string }
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Message == "lightq listening" && line.Addr != "" {
			return line.Addr, true
		}
	}
	return "", false
}
