package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lightq/lightq/broker/brokertest"
)

// The cluster runner: broker processes on loopback, each with its own data directory, a
// stable client address and a stable cluster address in front of it, started, stopped,
// killed, paused and resumed by the test, which waits on their log lines and /readyz rather
// than on the clock.
//
// Addresses. Peers list each other's cluster addresses before any of them starts, so those
// must be known up front, and stay the same across restarts; so must the client addresses,
// which clients keep across a kill -9 of all three brokers. Both are proxies in this process
// (Proxy), listening on 127.0.0.1:0: no port is reserved and handed on, so none can be lost
// to another process meanwhile. Behind them each broker listens for clients on 127.0.0.1:0
// (it logs the port, brokertest.ListenAddr) and advertises its client proxy (advertise-addr);
// its cluster port (cluster-listen) is fixed for the run, since a broker logs no cluster
// port: a port the kernel picked free on 127.0.0.2-4 (node 1-3), addresses that no client
// socket's ephemeral port is taken from (they all bind 127.0.0.1), so the one race left is
// with another process listening on those addresses between the pick and the broker's
// bind. The fault proxy stands between the peers (their cluster-peers name it).

const (
	adminPass    = "chaos-admin-password"
	hashParams   = "m=64,t=1,p=1"
	clusterToken = "chaos-cluster-secret-0123456789" // >= 16 bytes
)

// errNoCluster: the broker refused the cluster settings ("not supported by this build
// yet"): replication is not wired into this build.
var errNoCluster = errors.New("this build of lightq has no cluster support yet")

var (
	buildOnce sync.Once
	buildDir  string
	buildBin  string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// brokerBinary is $CHAOS_BIN, or cmd/lightq built once per test process.
func brokerBinary(t testing.TB) string {
	t.Helper()
	if bin := os.Getenv("CHAOS_BIN"); bin != "" {
		return bin
	}
	buildOnce.Do(func() {
		goTool, err := exec.LookPath("go")
		if err != nil && os.Getenv("GOROOT") != "" {
			goTool, err = filepath.Join(os.Getenv("GOROOT"), "bin", "go"), nil
		}
		if err != nil {
			buildErr = fmt.Errorf("no go tool to build the broker with: %w", err)
			return
		}
		if buildDir, err = os.MkdirTemp("", "lightq-chaos-bin-*"); err != nil {
			buildErr = err
			return
		}
		bin := filepath.Join(buildDir, "lightq")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, goTool, "build", "-o", bin, "github.com/lightq/lightq/cmd/lightq").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		buildBin = bin
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildBin
}

// dataBase is a directory on a real disk for the brokers' data (tmpfs makes fsync free,
// which hides what fsync=always costs and changes the timing), kept when the test fails.
func dataBase(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "lightq-chaos-*")
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Statfs_t
	if syscall.Statfs(dir, &st) == nil && (int64(st.Type) == 0x01021994 || int64(st.Type) == 0x858458f6) {
		os.RemoveAll(dir)
		root, err := filepath.Abs(filepath.Join("..", "..", ".chaos-tmp")) // gitignored
		if err == nil {
			err = os.MkdirAll(root, 0o755)
		}
		if err == nil {
			dir, err = os.MkdirTemp(root, "run-*")
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("data kept for inspection in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	return dir
}

// tailBuffer keeps the last 2-4 MiB written to it; safe for concurrent use.
type tailBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (w *tailBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b = append(w.b, p...)
	if len(w.b) > 4<<20 {
		w.b = append(w.b[:0:0], w.b[len(w.b)-2<<20:]...)
	}
	return len(p), nil
}

func (w *tailBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.b)
}

func (w *tailBuffer) tail(n int) string {
	s := w.String()
	if len(s) > n {
		s = "..." + s[len(s)-n:]
	}
	return s
}

// brokerProc is one run of a broker process.
type brokerProc struct {
	cmd      *exec.Cmd
	pid      int
	log      *tailBuffer
	exited   chan struct{}
	waitErr  error
	addr     string // where it listens for clients (behind the node's client proxy)
	httpAddr string
}

func (b *brokerProc) alive() bool {
	select {
	case <-b.exited:
		return false
	default:
		return true
	}
}

// node is one broker of the cluster over its restarts.
type node struct {
	id            uint32
	dir           string
	clusterListen string // its real cluster port (cluster-listen)
	client        *Proxy // the stable client address METADATA advertises
	peer          *Proxy // the stable cluster address its peers dial (nil without a cluster)
	proc          *brokerProc
	paused        bool
	starts        int
	raw           *RawConn // cached connection to its client proxy
	last          string   // the end of the previous process's log, for failure messages
}

// up reports whether the node's process runs and is not paused.
func (n *node) up() bool { return n.proc != nil && n.proc.alive() && !n.paused }

// cluster is the brokers of one run.
type cluster struct {
	t         testing.TB
	bin       string
	nodes     []*node
	faults    *Faults
	clustered bool
	topic     string
	parts     int
	replWait  time.Duration // bound of waitHealthy's waits; 0: replicationTimeout
}

// newCluster prepares size brokers (the processes start with startAll): with clustered,
// members of one cluster; without, size must be 1: a broker without cluster settings, to
// test the harness on a build without replication.
func newCluster(t testing.TB, size int, clustered bool) *cluster {
	t.Helper()
	if !clustered && size != 1 {
		t.Fatalf("%d brokers without cluster settings: only one is a cluster (of one)", size)
	}
	c := &cluster{t: t, bin: brokerBinary(t), faults: NewFaults(), clustered: clustered}
	base := dataBase(t)
	for i := 1; i <= size; i++ {
		n := &node{id: uint32(i), dir: filepath.Join(base, strconv.Itoa(i))}
		var err error
		if n.client, err = NewProxy(ProxyConfig{}); err != nil {
			t.Fatal(err)
		}
		if clustered {
			if n.clusterListen, err = freePort(fmt.Sprintf("127.0.0.%d", 1+i)); err != nil {
				t.Fatal(err)
			}
			if n.peer, err = NewProxy(ProxyConfig{Node: uint64(i), Faults: c.faults, Identify: &ClusterHello}); err != nil {
				t.Fatal(err)
			}
			n.peer.SetBackend(n.clusterListen)
		}
		c.nodes = append(c.nodes, n)
	}
	t.Cleanup(c.close)
	return c
}

// freePort returns host:port with a port the kernel found free on host (127.0.0.1 when host
// is not usable).
func freePort(host string) (string, error) {
	ln, err := net.Listen("tcp", host+":0")
	if err != nil {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func (c *cluster) close() {
	for _, n := range c.nodes {
		if n.proc != nil && n.proc.alive() {
			_ = syscall.Kill(n.proc.pid, syscall.SIGKILL)
			<-n.proc.exited
		}
		if n.raw != nil {
			n.raw.Close()
		}
		n.client.Close()
		if n.peer != nil {
			n.peer.Close()
		}
	}
}

func (c *cluster) node(id uint32) *node { return c.nodes[id-1] }

// seeds is every broker's client address, comma-separated: the Go client's seed list.
func (c *cluster) seeds() string {
	var s []string
	for _, n := range c.nodes {
		s = append(s, n.client.Addr())
	}
	return strings.Join(s, ",")
}

func (c *cluster) peers() string {
	var s []string
	for _, n := range c.nodes {
		s = append(s, fmt.Sprintf("%d=%s", n.id, n.peer.Addr()))
	}
	return strings.Join(s, ",")
}

// spawn starts node n's process; awaitUp waits for it to serve.
func (c *cluster) spawn(n *node) error {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LIGHTQ_") {
			env = append(env, kv)
		}
	}
	env = append(env, "LIGHTQ_ADMIN_PASSWORD="+adminPass)
	args := []string{"--addr", "127.0.0.1:0", "--data-dir", n.dir, "--hash-params", hashParams,
		"--log-level", "info", "--log-format", "json", "--shutdown-drain", "200ms", "--http-addr", "127.0.0.1:0"}
	if c.clustered {
		env = append(env, "LIGHTQ_CLUSTER_SECRET="+clusterToken)
		args = append(args, "--node-id", strconv.Itoa(int(n.id)), "--cluster-peers", c.peers(),
			"--cluster-listen", n.clusterListen, "--advertise-addr", n.client.Addr())
	}
	b := &brokerProc{log: &tailBuffer{}, exited: make(chan struct{})}
	b.cmd = exec.Command(c.bin, args...)
	b.cmd.Env = env
	b.cmd.Stdout = io.Discard
	b.cmd.Stderr = b.log
	if err := b.cmd.Start(); err != nil {
		return err
	}
	b.pid = b.cmd.Process.Pid
	go func() {
		b.waitErr = b.cmd.Wait()
		close(b.exited)
	}()
	if n.proc != nil {
		n.last = n.proc.log.tail(3000)
	}
	n.proc, n.paused = b, false
	n.starts++
	return nil
}

// opsLine is the log line naming the operations listener.
type opsLine struct {
	Message  string `json:"message"`
	HTTPAddr string `json:"http_addr"`
}

func httpAddrOf(log string) string {
	for _, line := range strings.Split(log, "\n") {
		var l opsLine
		if strings.Contains(line, "operations listener") && json.Unmarshal([]byte(line), &l) == nil && l.HTTPAddr != "" {
			return l.HTTPAddr
		}
	}
	return ""
}

var readyClient = &http.Client{Timeout: 2 * time.Second}

func ready(httpAddr string) bool {
	resp, err := readyClient.Get("http://" + httpAddr + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// awaitUp waits until node n's process logged its client address and /readyz answers 200,
// then points its client proxy at it.
func (c *cluster) awaitUp(n *node, timeout time.Duration) error {
	b := n.proc
	var exitErr error
	err := pollUntil(context.Background(), timeout, 5*time.Millisecond, func() bool {
		if !b.alive() {
			exitErr = fmt.Errorf("node %d exited while starting: %v", n.id, b.waitErr)
			return true
		}
		if b.addr == "" {
			b.addr, _ = brokertest.ListenAddr(b.log.String())
		}
		if b.httpAddr == "" {
			b.httpAddr = httpAddrOf(b.log.String())
		}
		return b.addr != "" && b.httpAddr != "" && ready(b.httpAddr)
	})
	if exitErr != nil {
		if strings.Contains(b.log.String(), "not supported by this build yet") {
			return fmt.Errorf("%w: %s", errNoCluster, lastLine(b.log.String()))
		}
		return fmt.Errorf("%w; log:\n%s", exitErr, b.log.tail(6000))
	}
	if err != nil {
		return fmt.Errorf("node %d not serving %v after start (addr %q, http %q); log:\n%s", n.id, timeout, b.addr, b.httpAddr, b.log.tail(6000))
	}
	n.client.SetBackend(b.addr)
	return nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return s
}

// startTimeout bounds a broker's start, recovery included; a loaded 2-core machine can take
// seconds for exec alone.
const startTimeout = 60 * time.Second

// startAll starts every node at once (a cluster member may wait for its peers before it
// serves) and waits for all.
func (c *cluster) startAll() error {
	for _, n := range c.nodes {
		if err := c.spawn(n); err != nil {
			return err
		}
	}
	var errs []error
	for _, n := range c.nodes {
		if err := c.awaitUp(n, startTimeout); err != nil {
			errs = append(errs, err)
		}
	}
	for _, err := range errs {
		if errors.Is(err, errNoCluster) {
			return err
		}
	}
	return errors.Join(errs...)
}

// start restarts node n (which is down) and waits for it.
func (c *cluster) start(n *node) {
	c.t.Helper()
	if n.proc != nil && n.proc.alive() {
		c.t.Fatalf("node %d: start while running", n.id)
	}
	if err := c.spawn(n); err != nil {
		c.t.Fatal(err)
	}
	if err := c.awaitUp(n, startTimeout); err != nil {
		c.t.Fatal(err)
	}
}

// kill sends SIGKILL (also to a paused process) and waits until it is gone.
func (c *cluster) kill(n *node) {
	c.t.Helper()
	c.signalAndWait(n, syscall.SIGKILL, 30*time.Second)
}

// stop shuts node n down cleanly (SIGTERM) and waits, failing if it does not exit in time.
func (c *cluster) stop(n *node) {
	c.t.Helper()
	if n.paused {
		c.resume(n)
	}
	c.signalAndWait(n, syscall.SIGTERM, 60*time.Second)
}

func (c *cluster) signalAndWait(n *node, sig syscall.Signal, timeout time.Duration) {
	c.t.Helper()
	b := n.proc
	if b == nil || !b.alive() {
		c.t.Fatalf("node %d is not running (signal %v); exit %v; log:\n%s", n.id, sig, b.waitErr, b.log.tail(4000))
	}
	n.client.SetBackend("")
	if err := syscall.Kill(b.pid, sig); err != nil {
		c.t.Fatalf("node %d: kill %v: %v", n.id, sig, err)
	}
	select {
	case <-b.exited:
	case <-time.After(timeout):
		_ = syscall.Kill(b.pid, syscall.SIGKILL)
		<-b.exited
		c.t.Fatalf("node %d still running %v after %v; log:\n%s", n.id, timeout, sig, b.log.tail(4000))
	}
	n.paused = false
	c.dropRaw(n)
}

// pause stops node n with SIGSTOP; resume continues it.
func (c *cluster) pause(n *node) {
	c.t.Helper()
	if err := syscall.Kill(n.proc.pid, syscall.SIGSTOP); err != nil {
		c.t.Fatal(err)
	}
	n.paused = true
	c.dropRaw(n) // a request to it would hang: ask the others
}

func (c *cluster) resume(n *node) {
	c.t.Helper()
	if err := syscall.Kill(n.proc.pid, syscall.SIGCONT); err != nil {
		c.t.Fatal(err)
	}
	n.paused = false
}

// rawConn is a cached RawConn to node n (which must be up).
func (c *cluster) rawConn(ctx context.Context, n *node) (*RawConn, error) {
	if n.raw != nil {
		return n.raw, nil
	}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r, err := DialRaw(dctx, n.client.Addr(), "admin", adminPass)
	if err != nil {
		return nil, err
	}
	n.raw = r
	return r, nil
}

func (c *cluster) dropRaw(n *node) {
	if n.raw != nil {
		n.raw.Close()
		n.raw = nil
	}
}

// logs is the end of every node's log, for failure messages.
func (c *cluster) logs() string {
	var b strings.Builder
	for _, n := range c.nodes {
		if n.proc == nil {
			continue
		}
		if n.last != "" {
			fmt.Fprintf(&b, "--- node %d, the end of its previous process:\n%s\n", n.id, n.last[max(0, len(n.last)-1000):])
		}
		fmt.Fprintf(&b, "--- node %d (pid %d, start %d, alive %v, paused %v):\n%s\n", n.id, n.proc.pid, n.starts, n.proc.alive(), n.paused, n.proc.log.tail(2500))
	}
	return b.String()
}
