package meta

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lightq/lightq/broker/auth"
	"github.com/lightq/lightq/wire"
)

const testPassword = "plaintext-never-on-disk"

var testHash = func() string {
	h, err := auth.Hash(testPassword, auth.TestParams())
	if err != nil {
		panic(err)
	}
	return h
}()

var created = time.Date(2025, 3, 4, 5, 6, 7, 8, time.FixedZone("X", 3600))

// seed adds two users and two topics: alice is an admin with both roles on orders, bob may
// consume ticks, of which he is the topic's user.
func seed(s *State) error {
	s.Users["alice"] = User{Name: "alice", Hash: testHash, Admin: true}
	s.Users["bob"] = User{Name: "bob", Hash: testHash}
	s.Topics["orders"] = Topic{Name: "orders", Kind: wire.KindDurable, Partitions: 3, User: "alice",
		Options: []wire.Option{{Key: "retention.bytes", Value: "1073741824"}}, CreatedAt: created}
	s.Topics["ticks"] = Topic{Name: "ticks", Kind: wire.KindTransient, Partitions: 1, User: "bob",
		Options: []wire.Option{}, CreatedAt: time.Now()}
	s.Grant("alice", "orders", wire.RolesBoth)
	s.Grant("bob", "ticks", wire.RolesConsume)
	return nil
}

func addTopic(name string) func(*State) error {
	return func(s *State) error {
		s.Topics[name] = Topic{Name: name, Kind: wire.KindDurable, Partitions: 1, User: "bob", CreatedAt: created}
		return nil
	}
}

func mustOpen(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(dir)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func seeded(t *testing.T, dir string) *Store {
	t.Helper()
	s := mustOpen(t, dir)
	if err := s.Update(seed); err != nil {
		t.Fatalf("seed: %v", err)
	}
	return s
}

func TestRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "meta")
	s := mustOpen(t, dir)
	if st := s.State(); len(st.Users) != 0 || len(st.Topics) != 0 || st.Users == nil || st.Topics == nil {
		t.Fatalf("fresh store state %+v", st)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("dir: %v %v", fi.Mode(), err)
	}
	if err := s.Update(seed); err != nil {
		t.Fatal(err)
	}
	want := s.State()
	if got := want.Topics["orders"].CreatedAt; !got.Equal(created) {
		t.Fatalf("CreatedAt %v", got)
	}
	got := mustOpen(t, dir).State()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("reopened state differs:\n got %+v\nwant %+v", got, want)
	}
	if u, ok := s.User("alice"); !ok || !u.Admin {
		t.Fatalf("User(alice) = %+v, %v", u, ok)
	}
	if tp, ok := s.Topic("orders"); !ok || tp.Partitions != 3 || len(tp.Options) != 1 {
		t.Fatalf("Topic(orders) = %+v, %v", tp, ok)
	}

	fi, err := os.Stat(filepath.Join(dir, FileName))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("meta.json mode %v, err %v", fi.Mode(), err)
	}
	data, _ := os.ReadFile(filepath.Join(dir, FileName))
	var env map[string]any
	if err := json.Unmarshal(data, &env); err != nil || env["format_version"] != 2.0 || !strings.HasPrefix(env["checksum"].(string), "sha256:") {
		t.Fatalf("envelope %v, err %v", env, err)
	}
	if bytes.Contains(data, []byte(testPassword)) {
		t.Fatal("plaintext password on disk")
	}
}

func TestStateIsACopy(t *testing.T) {
	s := seeded(t, t.TempDir())
	st := s.State()
	st.Topics["orders"].Options[0].Value = "changed"
	delete(st.Users, "bob")
	tp, _ := s.Topic("orders")
	tp.Options[0].Value = "changed too"
	again := s.State()
	if again.Topics["orders"].Options[0].Value != "1073741824" || len(again.Users) != 2 {
		t.Fatal("mutating a returned State changed the store")
	}
}

func TestUpdateRejected(t *testing.T) {
	errFn := errors.New("refused by fn")
	cases := []struct {
		name    string
		fn      func(*State) error
		wantErr error
	}{
		{"fn error", func(s *State) error { delete(s.Users, "alice"); return errFn }, errFn},
		{"bad topic name", func(s *State) error {
			s.Topics["a/b"] = Topic{Name: "a/b", Kind: wire.KindDurable, Partitions: 1, User: "bob"}
			return nil
		}, ErrInvalid},
		{"dot topic", func(s *State) error {
			s.Topics[".."] = Topic{Name: "..", Kind: wire.KindDurable, Partitions: 1, User: "bob"}
			return nil
		}, ErrInvalid},
		{"key mismatch", func(s *State) error {
			s.Topics["x"] = Topic{Name: "y", Kind: wire.KindDurable, Partitions: 1, User: "bob"}
			return nil
		}, ErrInvalid},
		{"kind 0", func(s *State) error {
			s.Topics["x"] = Topic{Name: "x", Partitions: 1, User: "bob"}
			return nil
		}, ErrInvalid},
		{"partitions 0", func(s *State) error {
			s.Topics["x"] = Topic{Name: "x", Kind: wire.KindDurable, User: "bob"}
			return nil
		}, ErrInvalid},
		{"partitions too many", func(s *State) error {
			s.Topics["x"] = Topic{Name: "x", Kind: wire.KindDurable, Partitions: wire.MaxPartitions + 1, User: "bob"}
			return nil
		}, ErrInvalid},
		{"unknown user", func(s *State) error {
			s.Topics["x"] = Topic{Name: "x", Kind: wire.KindDurable, Partitions: 1, User: "carol"}
			return nil
		}, ErrInvalid},
		{"deleting a topic's user without clearing it", func(s *State) error { delete(s.Users, "bob"); return nil }, ErrInvalid},
		{"grant on a missing topic", func(s *State) error { s.Grant("bob", "nope", wire.RolesProduce); return nil }, ErrInvalid},
		{"grant of no role", func(s *State) error {
			s.Users["bob"] = User{Name: "bob", Hash: testHash, Grants: map[string]wire.Roles{"orders": 0, "ticks": wire.RolesConsume}}
			return nil
		}, ErrInvalid},
		{"admin as a topic role", func(s *State) error { s.Grant("bob", "orders", wire.RolesAdmin); return nil }, ErrInvalid},
		{"deleting a topic with grants on it", func(s *State) error { delete(s.Topics, "orders"); return nil }, ErrInvalid},
		{"plaintext password", func(s *State) error {
			s.Users["carol"] = User{Name: "carol", Hash: testPassword}
			return nil
		}, ErrInvalid},
		{"empty user name", func(s *State) error { s.Users[""] = User{Hash: testHash}; return nil }, ErrInvalid},
		{"control char in user name", func(s *State) error {
			s.Users["a\nb"] = User{Name: "a\nb", Hash: testHash}
			return nil
		}, ErrInvalid},
		{"duplicate option", func(s *State) error {
			s.Topics["x"] = Topic{Name: "x", Kind: wire.KindDurable, Partitions: 1, User: "bob",
				Options: []wire.Option{{Key: "k", Value: "1"}, {Key: "k", Value: "2"}}}
			return nil
		}, ErrInvalid},
		{"empty option key", func(s *State) error {
			s.Topics["x"] = Topic{Name: "x", Kind: wire.KindDurable, Partitions: 1, User: "bob",
				Options: []wire.Option{{Key: "", Value: "1"}}}
			return nil
		}, ErrInvalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			s := seeded(t, dir)
			before := s.State()
			fileBefore, _ := os.ReadFile(filepath.Join(dir, FileName))
			err := s.Update(c.fn)
			if !errors.Is(err, c.wantErr) {
				t.Fatalf("Update error %v, want %v", err, c.wantErr)
			}
			if strings.Contains(err.Error(), testPassword) {
				t.Fatalf("error quotes the plaintext password: %v", err)
			}
			if !reflect.DeepEqual(s.State(), before) {
				t.Fatal("in-memory state changed")
			}
			if fileAfter, _ := os.ReadFile(filepath.Join(dir, FileName)); !bytes.Equal(fileBefore, fileAfter) {
				t.Fatal("file changed")
			}
		})
	}
}

func TestConcurrentUpdatesSerialise(t *testing.T) {
	dir := t.TempDir()
	s := seeded(t, dir)
	const goroutines, each = 8, 5
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range each {
				err := s.Update(func(st *State) error {
					// Racing Updates would pick the same name and lose topics.
					return addTopic(fmt.Sprintf("t-%03d", len(st.Topics)))(st)
				})
				if err != nil {
					t.Error(err)
				}
			}
		})
		wg.Go(func() {
			for range each * 4 {
				st := s.State()
				if len(st.Topics) < 2 {
					t.Error("lost the seed topics")
				}
				s.Topic("orders")
			}
		})
	}
	wg.Wait()
	want := 2 + goroutines*each
	if n := len(s.State().Topics); n != want {
		t.Fatalf("%d topics in memory, want %d", n, want)
	}
	if n := len(mustOpen(t, dir).State().Topics); n != want {
		t.Fatalf("%d topics on disk, want %d", n, want)
	}
}

func TestNoopUpdateWritesNothing(t *testing.T) {
	dir := t.TempDir()
	s := seeded(t, dir)
	f := newFaultFS()
	s.fs = f
	if err := s.Update(func(*State) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if f.calls["create"] != 0 {
		t.Fatal("a no-op Update wrote a file")
	}
}

func TestLeftoverTempFileRemoved(t *testing.T) {
	dir := t.TempDir()
	seeded(t, dir)
	want := mustOpen(t, dir).State()
	leftover := filepath.Join(dir, tempPrefix+"123456")
	if err := os.WriteFile(leftover, []byte(`{"format_version":1,"chec`), 0o600); err != nil {
		t.Fatal(err)
	}
	s := mustOpen(t, dir)
	if !reflect.DeepEqual(s.State(), want) {
		t.Fatal("state changed by a leftover temp file")
	}
	if _, err := os.Stat(leftover); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("leftover temp file still there: %v", err)
	}

	// A crash before the first rename leaves only a temp file: the state is empty.
	empty := t.TempDir()
	os.WriteFile(filepath.Join(empty, tempPrefix+"1"), []byte("{}"), 0o600)
	if st := mustOpen(t, empty).State(); len(st.Topics) != 0 {
		t.Fatal("temp file read as state")
	}
}
