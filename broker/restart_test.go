package broker

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/lightq/lightq/broker/meta"
	"github.com/lightq/lightq/wire"
)

// checkDataDir walks dir: no file may contain any of secrets (except the files named in
// allowed, relative to dir), and every regular file must be mode 0600.
func checkDataDir(t *testing.T, dir string, secrets []string, allowed ...string) {
	t.Helper()
	files := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		files++
		rel, _ := filepath.Rel(dir, path)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if fi.Mode().IsRegular() && fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", rel, fi.Mode().Perm())
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, a := range allowed {
			if rel == a {
				return nil
			}
		}
		for _, s := range secrets {
			if bytes.Contains(data, []byte(s)) {
				t.Errorf("%s contains the plaintext password %q", rel, s)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files == 0 {
		t.Fatalf("no files in the data dir %s", dir)
	}
	if _, err := os.Stat(filepath.Join(dir, meta.FileName)); err != nil {
		t.Fatalf("no %s in the data dir: %v", meta.FileName, err)
	}
}

// syncBuffer is a log sink that is safe for the broker's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type restartTopic struct {
	name       string
	partitions int
	user, pass string
	options    []wire.Option
}

// TestRestartKeepsTopicsAndCredentials: topics and credentials survive a restart on the same
// data dir; nothing on disk holds a plaintext password; the files are private.
func TestRestartKeepsTopicsAndCredentials(t *testing.T) {
	topics := []restartTopic{
		{"orders", 3, "orders-user", "orders-Secret-1a2b", nil},
		{"events", 1, "events-user", "events-Secret-3c4d", []wire.Option{{Key: "ring.slots", Value: "64"}}},
		{"audit.log", 2, "orders-user", "orders-Secret-1a2b", nil}, // a second topic of one user
	}
	secrets := []string{testAdminPass, "orders-Secret-1a2b", "events-Secret-3c4d"}

	cfg1 := testConfig(t)
	logs := &syncBuffer{}
	cfg1.Logger = zerolog.New(logs).Level(zerolog.DebugLevel)
	srv1 := startWith(t, cfg1)
	admin := login(t, srv1.Addr(), testAdminUser, testAdminPass)
	for _, tp := range topics {
		m := wire.CreateTopic{Name: tp.name, Kind: wire.KindTransient, Partitions: uint32(tp.partitions), User: tp.user, Password: tp.pass, Options: tp.options}
		admin.expectResponse(wire.OpCreateTopic, admin.send(wire.OpCreateTopic, m.AppendTo(nil)))
	}
	admin.produce("orders", 1, testBatch(t, "before restart"))
	if err := srv1.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	admin.expectClosed()
	checkDataDir(t, cfg1.DataDir, secrets)

	cfg2 := testConfig(t)
	cfg2.DataDir = cfg1.DataDir
	cfg2.Logger = cfg1.Logger
	srv2 := startWith(t, cfg2)
	admin = login(t, srv2.Addr(), testAdminUser, testAdminPass)
	var md wire.MetadataResponse
	if err := md.Decode(admin.expectResponse(wire.OpMetadata, admin.send(wire.OpMetadata, (&wire.MetadataRequest{}).AppendTo(nil)))); err != nil {
		t.Fatal(err)
	}
	if len(md.Topics) != len(topics) {
		t.Fatalf("after restart %d topics: %+v", len(md.Topics), md.Topics)
	}
	byName := map[string]wire.TopicMetadata{}
	for _, tm := range md.Topics {
		byName[tm.Name] = tm
	}
	for _, tp := range topics {
		tm, ok := byName[tp.name]
		switch {
		case !ok:
			t.Errorf("topic %s lost in the restart", tp.name)
		case tm.Kind != wire.KindTransient || len(tm.Partitions) != tp.partitions || tm.User != tp.user:
			t.Errorf("topic %s after restart: kind %s, %d partitions, user %q; want transient, %d, %q", tp.name, tm.Kind, len(tm.Partitions), tm.User, tp.partitions, tp.user)
		case fmt.Sprint(tm.Options) != fmt.Sprint(tp.options):
			t.Errorf("topic %s options %v, want %v", tp.name, tm.Options, tp.options)
		}
		for i, p := range tm.Partitions {
			// Transient messages do not survive a restart; the partitions start empty.
			if p.ID != uint32(i) || p.StartOffset != 0 || p.EndOffset != 0 {
				t.Errorf("topic %s partition %d after restart: %+v", tp.name, i, p)
			}
		}
	}
	// The topic users log in with their passwords, and only with them. Each wrong password is
	// followed by a good login, which resets the failed-login throttle.
	for _, tp := range topics {
		c := dialRaw(t, srv2.Addr())
		c.hello()
		bad := wire.Auth{User: tp.user, Password: tp.pass + "x"}
		c.expectError(c.send(wire.OpAuth, bad.AppendTo(nil)), wire.CodeAuthFailed)
		c.auth(tp.user, tp.pass)
		c.produce(tp.name, 0, testBatch(t, "after restart"))
		c.conn.Close()
	}
	// The admin password from the configuration still works; a wrong one does not.
	c := dialRaw(t, srv2.Addr())
	c.hello()
	bad := wire.Auth{User: testAdminUser, Password: "orders-Secret-1a2b"}
	c.expectError(c.send(wire.OpAuth, bad.AppendTo(nil)), wire.CodeAuthFailed)
	c.auth(testAdminUser, testAdminPass)

	if err := srv2.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkDataDir(t, cfg1.DataDir, secrets)
	for _, s := range secrets {
		if strings.Contains(logs.String(), s) {
			t.Errorf("the log contains the password %q", s)
		}
	}
}

// TestGeneratedAdminPassword: with no admin password configured, the broker generates one,
// stores it in DataDir/admin-password (0600), never logs it, and it works for AUTH as admin;
// after a restart (still without a configured password) it keeps working.
func TestGeneratedAdminPassword(t *testing.T) {
	logs := &syncBuffer{}
	cfg := testConfig(t)
	cfg.AdminPassword = ""
	cfg.Logger = zerolog.New(logs).Level(zerolog.DebugLevel)
	srv := startWith(t, cfg)

	path := filepath.Join(cfg.DataDir, AdminPasswordFile)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatalf("no generated password file: %v", err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s has mode %v, want 0600", AdminPasswordFile, fi.Mode().Perm())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pass := strings.TrimSpace(string(data))
	if len(pass) < 16 {
		t.Fatalf("generated password %q is short", pass)
	}
	c := dialRaw(t, srv.Addr())
	c.hello()
	var ar wire.AuthResponse
	m := wire.Auth{User: testAdminUser, Password: pass}
	if err := ar.Decode(c.expectResponse(wire.OpAuth, c.send(wire.OpAuth, m.AppendTo(nil)))); err != nil || ar.Role != wire.RoleAdmin {
		t.Fatalf("AUTH with the generated password: role %d, %v", ar.Role, err)
	}
	c.createTopic("t1", 1, "t1-user", "t1-Secret-zz9")
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkDataDir(t, cfg.DataDir, []string{pass, "t1-Secret-zz9"}, AdminPasswordFile)

	// Restart without a password: the stored admin stays, the file is not rewritten.
	cfg2 := testConfig(t)
	cfg2.DataDir, cfg2.AdminPassword, cfg2.Logger = cfg.DataDir, "", cfg.Logger
	srv2 := startWith(t, cfg2)
	if data2, err := os.ReadFile(path); err != nil || string(data2) != string(data) {
		t.Fatalf("admin-password file changed across a restart: %q -> %q (%v)", data, data2, err)
	}
	login(t, srv2.Addr(), testAdminUser, pass).createTopic("t2", 1, "t1-user", "t1-Secret-zz9")
	if err := srv2.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	if !strings.Contains(out, AdminPasswordFile) {
		t.Errorf("the log does not say where the generated password is:\n%s", out)
	}
	for _, s := range []string{pass, "t1-Secret-zz9"} {
		if strings.Contains(out, s) {
			t.Errorf("the log contains the password %q", s)
		}
	}
	checkDataDir(t, cfg.DataDir, []string{pass, "t1-Secret-zz9"}, AdminPasswordFile)
}

// TestGracefulShutdownDeliversAcked: a subscriber with credit gets every batch that was
// acknowledged before Shutdown, then the connection closes; Shutdown returns promptly.
func TestGracefulShutdownDeliversAcked(t *testing.T) {
	t.Parallel()
	srv := startBroker(t, func(c *Config) {
		c.RingBytes = 8 << 20 // holds every batch: nothing is dropped
		c.HighWaterMark = 8 << 20
		// Long enough for the subscriber to read everything on a loaded machine; the drain
		// ends as soon as every connection has closed.
		c.ShutdownDrain = 10 * time.Second
	})
	admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
	admin.createTopic("drain", 2, "drain-user", "drain-pw")
	sub := login(t, srv.Addr(), "drain-user", "drain-pw")
	sub.subscribe("drain", wire.PartitionAny, "", 1<<31-1)
	prod := login(t, srv.Addr(), "drain-user", "drain-pw")

	// About 6 MiB, which the subscriber does not read until Shutdown has begun, so more than
	// the socket buffers hold is still queued in the broker when Shutdown is called.
	value := strings.Repeat("d", 1000)
	const batches = 750
	acked := map[uint32]int64{} // partition -> next offset
	for i := 0; i < batches; i++ {
		vals := make([]string, 8)
		for j := range vals {
			vals[j] = fmt.Sprintf("%d-%d-%s", i, j, value)
		}
		pr := prod.produce("drain", int32(i%2), testBatch(t, vals...))
		if pr.BaseOffset != acked[pr.Partition] {
			t.Fatalf("batch %d stored at %d/%d", i, pr.Partition, pr.BaseOffset)
		}
		acked[pr.Partition] += 8
	}

	type result struct {
		err error
		dur time.Duration
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		err := srv.Shutdown(context.Background())
		done <- result{err, time.Since(start)}
	}()

	got := map[uint32]int64{}
	frames, closed := 0, false
	var shuttingDown bool
	for i := 0; i < batches+10 && !closed; i++ {
		f, err := sub.readFrame(5 * time.Second)
		if err != nil {
			if ne, ok := err.(interface{ Timeout() bool }); ok && ne.Timeout() {
				t.Fatalf("subscriber still open 5 s into shutdown, after %d batches", frames)
			}
			closed = true
			break
		}
		switch f.h.Op {
		case wire.OpDeliver:
			var d wire.Deliver
			if err := d.Decode(f.body); err != nil {
				t.Fatal(err)
			}
			bt, err := wire.ParseBatch(d.Batch, 1<<20)
			if err != nil || d.Dropped != 0 || bt.BaseOffset != got[d.Partition] {
				t.Fatalf("delivery %d: partition %d offset %d (want %d), dropped %d, %v", frames, d.Partition, bt.BaseOffset, got[d.Partition], d.Dropped, err)
			}
			got[d.Partition] += int64(bt.RecordCount)
			frames++
		case wire.OpError:
			var eb wire.ErrorBody
			_ = eb.Decode(f.body)
			if eb.Code != wire.CodeShuttingDown || f.h.Corr != 0 {
				t.Fatalf("subscriber got ERROR %s corr %d: %s", eb.Code, f.h.Corr, eb.Message)
			}
			shuttingDown = true
		default:
			t.Fatalf("subscriber got %s", f.h.Op)
		}
	}
	if !closed {
		t.Fatal("subscriber not closed after all batches")
	}
	for p, n := range acked {
		if got[p] != n {
			t.Errorf("partition %d: subscriber got %d acknowledged messages of %d", p, got[p], n)
		}
	}
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("Shutdown: %v", r.err)
		}
		t.Logf("Shutdown took %v; %d batches delivered; SHUTTING_DOWN seen: %v", r.dur, frames, shuttingDown)
		if r.dur >= srv.cfg.ShutdownDrain {
			t.Errorf("Shutdown took %v: it waited out its drain deadline though every connection had closed", r.dur)
		}
	case <-time.After(srv.cfg.ShutdownDrain + 5*time.Second):
		t.Fatal("Shutdown did not return after its drain deadline")
	}
	// The producer's connection was closed too.
	prod.expectClosed()
}

// TestShutdownSendsShuttingDown: PROTOCOL.md 4.4: "When the broker shuts down it sends
// SHUTTING_DOWN with corr id 0 and closes."
func TestShutdownSendsShuttingDown(t *testing.T) {
	srv := startBroker(t, nil)
	idle := login(t, srv.Addr(), testAdminUser, testAdminPass)
	pre := dialRaw(t, srv.Addr()) // not even HELLO yet
	// Shutdown must find pre open (a connection still in the accept queue when the listener
	// closes is reset, with no frame).
	waitUntil(t, "both connections open in the broker", func() bool { return openConns(srv) == 2 })
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*rawClient{idle, pre} {
		h, eb := c.errorFrame(5 * time.Second)
		if eb.Code != wire.CodeShuttingDown || h.Corr != 0 {
			t.Fatalf("got %s corr %d, want SHUTTING_DOWN corr 0", eb.Code, h.Corr)
		}
		c.expectClosed()
	}
}

// TestShutdownWithStuckSubscriber: a subscriber that stops reading does not hold Shutdown up
// beyond Config.ShutdownDrain (plus gnet's stop).
func TestShutdownWithStuckSubscriber(t *testing.T) {
	t.Parallel()
	srv := startBroker(t, func(c *Config) { c.RingBytes = 8 << 20; c.HighWaterMark = 8 << 20 })
	admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
	admin.createTopic("stuck", 1, "stuck-user", "stuck-pw")
	sub := login(t, srv.Addr(), "stuck-user", "stuck-pw")
	sub.subscribe("stuck", 0, "", 1<<31-1)
	vals := make([]string, 60)
	for i := range vals {
		vals[i] = strings.Repeat("s", 1000)
	}
	batch := testBatch(t, vals...)
	for i := 0; i < 60; i++ { // about 3.6 MB, more than the sockets buffer
		admin.produce("stuck", 0, batch)
	}
	start := time.Now()
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	el := time.Since(start)
	t.Logf("Shutdown with a stuck subscriber took %v (drain %v)", el, srv.cfg.ShutdownDrain)
	// ShutdownDrain plus gnet's stop (0.5 s) and room for a loaded machine: what the bound
	// catches is a stuck subscriber holding Shutdown up without limit.
	if el > srv.cfg.ShutdownDrain+5*time.Second {
		t.Fatalf("Shutdown took %v with ShutdownDrain %v", el, srv.cfg.ShutdownDrain)
	}
	// The subscriber's connection ends (after whatever was queued).
	for i := 0; i < 100; i++ {
		if _, err := sub.readFrame(5 * time.Second); err != nil {
			if ne, ok := err.(interface{ Timeout() bool }); ok && ne.Timeout() {
				t.Fatal("subscriber still open after Shutdown")
			}
			return
		}
	}
	t.Fatal("subscriber still receiving 100 frames after Shutdown returned")
}

// TestShutdownAnswersOwedDurableAcks: a producer pipelining fsync-before-ack batches while the
// broker shuts down gets an answer for every batch it stored (the connection stays open until
// the syncer has acknowledged them), then SHUTTING_DOWN as the answer to the first batch the
// broker refused. After a restart the log holds exactly the acknowledged records.
func TestShutdownAnswersOwedDurableAcks(t *testing.T) {
	cfg := testConfig(t)
	srv := startWith(t, cfg)
	admin := login(t, srv.Addr(), testAdminUser, testAdminPass)
	admin.createDurable("owed", 1, wire.Option{Key: "fsync", Value: "always"})
	prod := login(t, srv.Addr(), "d-user", "d-pw")
	batch := testBatch(t, "a", "b", "c", "d")

	// Pipeline batches until the connection breaks, at most 1M of them or for 10 s.
	stop := make(chan struct{})
	go func() {
		deadline := time.Now().Add(10 * time.Second)
		body := produceBody("owed", 0, wire.AcksWritten, batch)
		var frame []byte
		for i := uint32(1); i <= 1_000_000 && time.Now().Before(deadline); i++ {
			select {
			case <-stop:
				return
			default:
			}
			frame = wire.AppendFrame(frame[:0], wire.OpProduce, 0, i, body)
			if _, err := prod.conn.Write(frame); err != nil {
				return
			}
		}
	}()
	defer close(stop)

	var acked, refusedCorr uint32
	var readErr error
	shutdown := make(chan error, 1)
	for {
		f, err := prod.readFrame(10 * time.Second)
		if err != nil {
			readErr = err
			break // closed after SHUTTING_DOWN (checked below)
		}
		switch f.h.Op {
		case wire.OpProduce:
			if refusedCorr != 0 {
				t.Fatalf("ack for corr %d after the refusal of %d", f.h.Corr, refusedCorr)
			}
			if f.h.Corr != acked+1 {
				t.Fatalf("ack for corr %d, want %d", f.h.Corr, acked+1)
			}
			acked++
			if acked == 200 {
				go func() { shutdown <- srv.Shutdown(context.Background()) }()
			}
		case wire.OpError:
			var eb wire.ErrorBody
			_ = eb.Decode(f.body)
			if eb.Code != wire.CodeShuttingDown {
				t.Fatalf("ERROR %s corr %d: %s", eb.Code, f.h.Corr, eb.Message)
			}
			refusedCorr = f.h.Corr
			if refusedCorr == 0 {
				refusedCorr = ^uint32(0) // drained before any PRODUCE was refused
			}
		default:
			t.Fatalf("got %s", f.h.Op)
		}
	}
	if refusedCorr == 0 {
		t.Fatalf("connection closed without SHUTTING_DOWN after %d acks: %v", acked, readErr)
	}
	if err := <-shutdown; err != nil {
		t.Fatal(err)
	}
	t.Logf("%d batches acknowledged before the shutdown refusal (corr %d)", acked, refusedCorr)

	srv2 := startWith(t, cfg)
	c := login(t, srv2.Addr(), "d-user", "d-pw")
	md := wire.MetadataRequest{Topics: []string{"owed"}}
	var resp wire.MetadataResponse
	if err := resp.Decode(c.expectResponse(wire.OpMetadata, c.send(wire.OpMetadata, md.AppendTo(nil)))); err != nil {
		t.Fatal(err)
	}
	if end := resp.Topics[0].Partitions[0].EndOffset; end != int64(acked)*4 {
		t.Fatalf("log ends at %d after restart; %d batches of 4 were acknowledged (%d records)", end, acked, acked*4)
	}
}
