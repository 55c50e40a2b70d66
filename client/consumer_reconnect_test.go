package client_test

// DialConsumer's reconnects, against real brokers that stop and start (see consumer_test.go).

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lightq/lightq/broker"
	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/internal/proxytest"
	"github.com/lightq/lightq/wire"
)

func TestDialConsumerReconnect(t *testing.T) {
	t.Parallel()
	proxy, dir := proxytest.Start(t), t.TempDir()
	same := func(cfg *broker.Config) {
		cfg.DataDir = dir
		cfg.Groups.MinSessionTimeout = 100 * time.Millisecond
	}
	srv1, c1 := ckSetup(t, same, "dur", 2)
	proxy.SetBackend(srv1.Addr())
	const n1, n2 = 2000, 1000
	var acks []client.Ack
	ckProduce(t, c1, client.ProducerOptions{Topic: "dur", BatchBytes: 4 << 10}, 0, n1, &acks, nil)
	c1.Close()

	var emu sync.Mutex
	var reported []error
	redialFailed := make(chan struct{})
	var redialOnce sync.Once
	k, err := client.DialConsumer(itCtx(t), proxy.Addr(), client.Options{User: itUser, Password: itPass},
		// A session of 2 s: the restarted broker withholds the group's partitions that long.
		client.ConsumerOptions{Topic: "dur", Group: "g", SessionTimeout: 2 * time.Second, MaxBytes: 8 << 10, Prefetch: 32 << 10, OnError: func(err error) {
			emu.Lock()
			defer emu.Unlock()
			reported = append(reported, err)
			if strings.Contains(err.Error(), ": redial in ") {
				redialOnce.Do(func() { close(redialFailed) })
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()

	reached, resume := make(chan struct{}), make(chan struct{})
	var got []itRecord
	consumed := make(chan error, 1)
	go func() {
		consumed <- k.Each(itCtx(t), func(m *client.Received) error {
			got = append(got, copyReceived(m))
			if len(got) == n1/4 {
				close(reached)
				<-resume // the broker goes away while this handler runs
			}
			if len(got) == n1+n2 {
				return errItDone
			}
			return nil
		})
	}()
	<-reached
	proxy.SetBackend("") // the broker's address refuses from now on
	if err := srv1.Shutdown(itCtx(t)); err != nil {
		t.Fatal(err)
	}
	close(resume)
	<-redialFailed // the consumer drains, then redials in vain
	srv2 := startBroker(t, same)
	proxy.SetBackend(srv2.Addr())
	c2 := itDial(t, srv2.Addr(), itUser, itPass)
	ckProduce(t, c2, client.ProducerOptions{Topic: "dur", BatchBytes: 4 << 10}, n1, n1+n2, &acks, nil)
	if err := <-consumed; !errors.Is(err, errItDone) {
		t.Fatalf("Each: %v after %d records", err, len(got))
	}
	ckVerify(t, got, acks, ckRange(0, n1+n2))
	emu.Lock()
	for _, err := range reported {
		t.Logf("OnError: %v", err)
	}
	if len(reported) == 0 || !errors.Is(reported[0], client.ErrConnectionLost) {
		t.Errorf("OnError got %v, want the connection loss first", reported)
	}
	emu.Unlock()
	if err := k.Close(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []int32{0, 1} {
		off, err := c2.FetchCommitted(itCtx(t), wire.FetchCommitted{Group: "g", Topic: "dur", Partition: uint32(p)})
		if err != nil || off != k.Position(p) {
			t.Errorf("partition %d committed %d (%v), position %d", p, off, err, k.Position(p))
		}
	}
}
