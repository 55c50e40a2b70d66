package transport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// testSession is a handshake's session with fixed nonces.
func testSession() session {
	ss := session{h: hello{magic: handshakeMagic, from: 5, to: 1}}
	for i := range ss.h.nonce {
		ss.h.nonce[i], ss.nonceL[i] = byte(i), byte(0xf0+i)
	}
	return ss
}

// TestFeaturesMessage: the listener's features message decodes to what was sent, and any
// change (of its bytes, the secret, the session it claims) is refused.
func TestFeaturesMessage(t *testing.T) {
	ss := testSession()
	good := appendFeatures(nil, testSecret, &ss, Features)
	if len(good) != featuresSize || string(good[:4]) != featuresMagic {
		t.Fatalf("features message % x", good)
	}
	if f, err := parseFeatures(good, testSecret, &ss); err != nil || f != Features {
		t.Fatalf("parse: %#x, %v", f, err)
	}
	other := ss
	other.nonceL[0] ^= 1
	unknown := appendFeatures(nil, testSecret, &ss, Features|1<<63)
	cases := []struct {
		name    string
		b       []byte
		secret  []byte
		ss      session
		want    uint64
		wantErr bool
	}{
		{"ok", good, testSecret, ss, Features, false},
		{"no features", appendFeatures(nil, testSecret, &ss, 0), testSecret, ss, 0, false},
		{"unknown bits kept", unknown, testSecret, ss, Features | 1<<63, false},
		{"short", good[:featuresSize-1], testSecret, ss, 0, true},
		{"long", append(bytes.Clone(good), 0), testSecret, ss, 0, true},
		{"magic", append([]byte("LQRC"), good[4:]...), testSecret, ss, 0, true},
		{"bit flipped in the features", flip(good, 11), testSecret, ss, 0, true},
		{"bit flipped in the MAC", flip(good, featuresSize-1), testSecret, ss, 0, true},
		{"wrong secret", good, []byte("not the secret at all"), ss, 0, true},
		{"another session (a replay)", good, testSecret, other, 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, err := parseFeatures(tc.b, tc.secret, &tc.ss)
			if tc.wantErr {
				if !errors.Is(err, ErrAuth) {
					t.Fatalf("got %#x, %v; want an ErrAuth", f, err)
				}
				return
			}
			if err != nil || f != tc.want {
				t.Fatalf("got %#x, %v; want %#x", f, err, tc.want)
			}
		})
	}
}

func flip(b []byte, i int) []byte {
	c := bytes.Clone(b)
	c[i] ^= 1
	return c
}

// TestParseHello: the hello decoder's cases, the layout in handshake.go.
func TestParseHello(t *testing.T) {
	h := hello{magic: handshakeMagic, from: 7, to: 3}
	h.nonce[0] = 9
	good := h.append(nil)
	seg := hello{magic: segMagic, from: 7, to: 3}
	cases := []struct {
		name string
		b    []byte
		ok   bool
	}{
		{"message stream", good, true},
		{"segment stream", seg.append(nil), true},
		{"short", good[:helloSize-1], false},
		{"long", append(bytes.Clone(good), 0), false},
		{"magic", append([]byte("LQXX"), good[4:]...), false},
		{"version 2", func() []byte { c := bytes.Clone(good); c[4] = 2; return c }(), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseHello(tc.b)
			if !tc.ok {
				if !errors.Is(err, ErrAuth) {
					t.Fatalf("got %+v, %v; want an ErrAuth", got, err)
				}
				return
			}
			if err != nil || got.from != 7 || got.to != 3 {
				t.Fatalf("got %+v, %v", got, err)
			}
		})
	}
}

// FuzzHandshake: the listener's decoder of hellos and the dialer's of features messages
// refuse what they do not take with ErrAuth and never panic; what they take encodes back to
// the same bytes.
func FuzzHandshake(f *testing.F) {
	ss := testSession()
	f.Add(ss.h.append(nil))
	f.Add(appendFeatures(nil, testSecret, &ss, Features))
	f.Add([]byte("LQFT\x00\x00\x00\x00\x00\x00\x00\x01"))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: example.org\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if h, err := parseHello(b); err == nil {
			if !bytes.Equal(h.append(nil), b) {
				t.Fatalf("hello % x encodes back as % x", b, h.append(nil))
			}
		} else if !errors.Is(err, ErrAuth) {
			t.Fatalf("hello: %v does not wrap ErrAuth", err)
		}
		if len(b) == featuresSize && string(b[:4]) == featuresMagic && b[4]&1 == 1 {
			// Give the MAC a chance: most mutations would stop there.
			copy(b[12:], featuresMAC(testSecret, &ss, binary.BigEndian.Uint64(b[4:])))
		}
		fs, err := parseFeatures(b, testSecret, &ss)
		if err != nil {
			if !errors.Is(err, ErrAuth) {
				t.Fatalf("features: %v does not wrap ErrAuth", err)
			}
			return
		}
		if again := appendFeatures(nil, testSecret, &ss, fs); !bytes.Equal(again, b) {
			t.Fatalf("features % x encode back as % x", b, again)
		}
	})
}

// oldListener is a peer of the previous release at the wire: the handshake, then frames,
// and no features message. It reports the frames' envelopes on got.
func oldListener(t *testing.T, self uint64) (addr string, got chan Envelope) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got = make(chan Envelope, 64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := acceptHandshake(c, testSecret, self); err != nil {
					return
				}
				for {
					var hdr [frameHeaderSize]byte
					if _, err := io.ReadFull(c, hdr[:]); err != nil {
						return
					}
					size, err := frameSize(hdr[:])
					if err != nil {
						return
					}
					buf := make([]byte, size)
					copy(buf, hdr[:])
					if _, err := io.ReadFull(c, buf[frameHeaderSize:]); err != nil {
						return
					}
					_ = decodeFrame(buf, func(e Envelope) { got <- e })
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String(), got
}

// TestPeerFeatures: a dialer records the features its peer's listener announced, and none
// for a listener of the previous release (no features message) or one that sends none
// (Config.NoFeatures); a message that needs a feature is written only to a connection that
// has it, and the others go on.
func TestPeerFeatures(t *testing.T) {
	a := startNode(t, 1, testSecret, nil, "")
	b := startNode(t, 2, testSecret, nil, "")
	quiet, err := New(Config{NodeID: 3, Listen: "127.0.0.1:0", Secret: testSecret, Handler: func(uint64, []Envelope) {}, NoFeatures: true})
	if err != nil {
		t.Fatal(err)
	}
	defer quiet.Close()
	oldAddr, oldGot := oldListener(t, 4)
	a.tr.SetPeer(2, b.tr.Addr().String())
	a.tr.SetPeer(3, quiet.Addr().String())
	a.tr.SetPeer(4, oldAddr)
	if f, known := a.tr.PeerFeatures(2); f != 0 || known {
		t.Fatalf("features %#x (known %v) before any connection", f, known)
	}

	// A new peer: its features arrive just after the connection's handshake.
	b.in.waitFor(t, "node 2's features", func() bool {
		a.tr.Send(2, heartbeat(1, 1))
		f, known := a.tr.PeerFeatures(2)
		return f == Features && known
	})
	snap := Envelope{Group: 1, Msg: raftpb.Message{Type: raftpb.MsgSnap, Index: 77, Snapshot: &raftpb.Snapshot{Data: []byte("v2")}}, Needs: FeatureSegmentCatchUp}
	a.tr.Send(2, snap)
	b.in.waitFor(t, "the message that needs the feature", func() bool { return count(b.in.from(1), 77) == 1 })

	// Peers without the features: a message that needs one is dropped, the next arrives.
	for _, node := range []uint64{3, 4} {
		poll(t, fmt.Sprintf("a connection to node %d", node), func() bool {
			a.tr.Send(node, heartbeat(1, 1)) // dials; a link that failed meanwhile is dialled again
			return a.tr.PeerStats()[node-2].Connected
		})
		if f, _ := a.tr.PeerFeatures(node); f != 0 {
			t.Fatalf("node %d announced nothing, yet has features %#x", node, f)
		}
	}
	before := a.tr.PeerStats()[2].Dropped
	a.tr.Send(4, snap)
	a.tr.Send(4, heartbeat(1, 78))
	for {
		e := <-oldGot
		if e.Msg.Index == 77 {
			t.Fatal("the old peer got a message that needs a feature it did not announce")
		}
		if e.Msg.Index == 78 {
			break
		}
	}
	if d := a.tr.PeerStats()[2].Dropped; d != before+1 {
		t.Fatalf("dropped %d, want %d", d, before+1)
	}

	// A new connection starts without features until its announcement: the peer restarted
	// (here on the previous release, at the same address: node 2's listener stops sending).
	b.tr.Close()
	b2, err := New(Config{NodeID: 2, Listen: b.tr.Addr().String(), Secret: testSecret, Handler: func(uint64, []Envelope) {}, NoFeatures: true})
	if err != nil {
		t.Skipf("the address could not be taken again: %v", err)
	}
	defer b2.Close()
	poll(t, "the closed connection's features to go", func() bool {
		a.tr.Send(2, heartbeat(1, 1)) // the write that finds the connection closed
		f, _ := a.tr.PeerFeatures(2)
		return f == 0 && a.tr.PeerStats()[0].Connected
	})
}

// TestPeerFeaturesWait: a peer's features are not known without a connection, nor on a new
// one until they arrive or Config.FeaturesWait passes without them (the previous release):
// a leader must not take a peer that has not spoken yet for an old one.
func TestPeerFeaturesWait(t *testing.T) {
	const wait = 500 * time.Millisecond
	a, err := New(Config{NodeID: 1, Listen: "127.0.0.1:0", Secret: testSecret, Handler: func(uint64, []Envelope) {},
		RedialMin: time.Millisecond, RedialMax: 20 * time.Millisecond, FeaturesWait: wait})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	oldAddr, _ := oldListener(t, 4)
	a.SetPeer(4, oldAddr)
	if _, known := a.PeerFeatures(4); known {
		t.Fatal("features known before any connection")
	}
	start := time.Now()
	poll(t, "a connection to node 4", func() bool {
		a.Send(4, heartbeat(1, 1))
		return a.PeerStats()[0].Connected
	})
	if f, known := a.PeerFeatures(4); known && time.Since(start) < wait {
		t.Fatalf("features %#x known %v after the dial, before the wait of %v passed", f, time.Since(start), wait)
	}
	poll(t, "node 4 taken for the previous release", func() bool {
		f, known := a.PeerFeatures(4)
		return known && f == 0
	})
	if took := time.Since(start); took < wait {
		t.Fatalf("no features taken as final after %v, before the wait of %v", took, wait)
	}
}

// poll checks cond on a short tick until it holds, failing after a deadline generous for
// a loaded machine (cond may send: each check is a message raft would resend).
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
