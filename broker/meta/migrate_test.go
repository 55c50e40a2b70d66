package meta

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/lightq/lightq/wire"
)

// marshalV1 writes a state as format 1 did (f02ffc2's format.go): users without grants, and
// each topic's required user. Grants are dropped; the test gives every topic a user.
func marshalV1(t testing.TB, s State) []byte {
	t.Helper()
	var d diskStateV1
	d.Users = []diskUserV1{}
	for _, name := range slices.Sorted(maps.Keys(s.Users)) {
		u := s.Users[name]
		d.Users = append(d.Users, diskUserV1{Name: u.Name, Hash: u.Hash, Admin: u.Admin})
	}
	d.Topics = []diskTopicV1{}
	for _, name := range slices.Sorted(maps.Keys(s.Topics)) {
		tp := s.Topics[name]
		dt := diskTopicV1{Name: tp.Name, Kind: tp.Kind.String(), Partitions: tp.Partitions, User: tp.User, CreatedAt: tp.CreatedAt}
		for _, o := range tp.Options {
			dt.Options = append(dt.Options, diskOption{Key: o.Key, Value: o.Value})
		}
		d.Topics = append(d.Topics, dt)
	}
	body, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	out, err := json.MarshalIndent(envelope{FormatVersion: 1, Checksum: checksum(body), State: body}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(out, '\n')
}

// v1State is a format 1 state: alice (admin) owns orders, bob owns ticks.
func v1State(t *testing.T) State {
	t.Helper()
	s := State{Users: map[string]User{}, Topics: map[string]Topic{}}
	if err := seed(&s); err != nil {
		t.Fatal(err)
	}
	for name, u := range s.Users {
		u.Grants = nil
		s.Users[name] = u
	}
	return s
}

// TestOpenMigratesV1: a format 1 meta.json opens as the same users and topics, each topic's
// user holding both roles on it; the old bytes are kept in meta.json.v1, meta.json becomes
// format 2, and the next Open migrates nothing.
func TestOpenMigratesV1(t *testing.T) {
	dir := t.TempDir()
	want := v1State(t)
	old := marshalV1(t, want)
	path := filepath.Join(dir, FileName)
	if err := os.WriteFile(path, old, 0o600); err != nil {
		t.Fatal(err)
	}
	s := mustOpen(t, dir)
	if s.MigratedFrom() != 1 {
		t.Fatalf("MigratedFrom = %d, want 1", s.MigratedFrom())
	}
	want = want.Clone()
	for name, tp := range want.Topics {
		tp.CreatedAt = tp.CreatedAt.UTC().Round(0)
		want.Topics[name] = tp
	}
	want.Grant("alice", "orders", wire.RolesBoth)
	want.Grant("bob", "ticks", wire.RolesBoth)
	want.normalize()
	if got := s.State(); !reflect.DeepEqual(got, want) {
		t.Fatalf("migrated state:\n got %+v\nwant %+v", got, want)
	}
	if backup, err := os.ReadFile(filepath.Join(dir, BackupV1)); err != nil || !bytes.Equal(backup, old) {
		t.Fatalf("backup: %v; equal to the old file: %v", err, bytes.Equal(backup, old))
	}
	if fi, err := os.Stat(filepath.Join(dir, BackupV1)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("backup mode: %v, %v", fi, err)
	}
	data, _ := os.ReadFile(path)
	if !bytes.Contains(data, []byte(`"format_version": 2`)) || !bytes.Contains(data, []byte(`"grants"`)) {
		t.Fatalf("meta.json after migration:\n%s", data)
	}
	if len(tempFiles(t, dir)) != 0 {
		t.Fatal("temporary files left")
	}
	again := mustOpen(t, dir)
	if again.MigratedFrom() != 0 || !reflect.DeepEqual(again.State(), want) {
		t.Fatalf("second Open: migrated from %d, state %+v", again.MigratedFrom(), again.State())
	}
}

// TestMigrationFailureLeavesV1: a write that fails during the migration makes Open fail,
// naming the file, and leaves the format 1 file as it was, so the next Open migrates it.
func TestMigrationFailureLeavesV1(t *testing.T) {
	// Each operation fails once, at the backup's write (skip 0) or at meta.json's (skip 1).
	for _, c := range []struct {
		op   string
		skip int
	}{{"create", 0}, {"create", 1}, {"write", 0}, {"write", 1}, {"sync", 0}, {"sync", 1}, {"rename", 0}, {"rename", 1}, {"syncdir", 0}} {
		t.Run(fmt.Sprintf("%s after %d", c.op, c.skip), func(t *testing.T) {
			dir := t.TempDir()
			old := marshalV1(t, v1State(t))
			path := filepath.Join(dir, FileName)
			if err := os.WriteFile(path, old, 0o600); err != nil {
				t.Fatal(err)
			}
			f := newFaultFS()
			f.skip[c.op], f.fail[c.op] = c.skip, 1
			_, err := openFS(dir, f)
			if !errors.Is(err, errInjected) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "migrating") {
				t.Fatalf("Open error %v, want the injected fault naming %s", err, path)
			}
			if data, _ := os.ReadFile(path); !bytes.Equal(data, old) {
				t.Fatal("meta.json changed by a failed migration")
			}
			if s := mustOpen(t, dir); s.MigratedFrom() != 1 {
				t.Fatalf("retry: MigratedFrom = %d", s.MigratedFrom())
			}
		})
	}
}

// TestOpenV1Invalid: format 1 files that break its rules are refused, naming the file.
func TestOpenV1Invalid(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(s *State)
		want error
	}{
		{"topic user missing", func(s *State) { delete(s.Users, "bob") }, ErrInvalid},
		{"unknown kind", func(s *State) { tp := s.Topics["ticks"]; tp.Kind = 9; s.Topics["ticks"] = tp }, ErrCorrupt},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			st := v1State(t)
			c.edit(&st)
			path := filepath.Join(dir, FileName)
			if err := os.WriteFile(path, marshalV1(t, st), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := Open(dir); !errors.Is(err, c.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("Open: %v, want %v naming %s", err, c.want, path)
			}
			if _, err := os.Stat(filepath.Join(dir, BackupV1)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("a refused file was migrated: %v", err)
			}
		})
	}
}

// TestACLChanges: Grant adds roles, Revoke removes them (and the grant with the last one),
// RemoveTopic takes its grants, RemoveUser clears it as a topic's user; all through Update.
func TestACLChanges(t *testing.T) {
	dir := t.TempDir()
	s := seeded(t, dir)
	step := func(fn func(*State)) State {
		t.Helper()
		if err := s.Update(func(st *State) error { fn(st); return nil }); err != nil {
			t.Fatal(err)
		}
		if re := mustOpen(t, dir).State(); !reflect.DeepEqual(re, s.State()) {
			t.Fatalf("reopened state differs:\n%+v\n%+v", re, s.State())
		}
		return s.State()
	}
	st := step(func(st *State) {
		st.Grant("bob", "orders", wire.RolesProduce)
		st.Grant("bob", "ticks", wire.RolesProduce)
	})
	if g := st.Users["bob"].Grants; g["orders"] != wire.RolesProduce || g["ticks"] != wire.RolesBoth {
		t.Fatalf("after grants: %v", g)
	}
	st = step(func(st *State) {
		st.Revoke("bob", "ticks", wire.RolesBoth)
		st.Revoke("bob", "orders", wire.RolesConsume)
	})
	if g := st.Users["bob"].Grants; len(g) != 1 || g["orders"] != wire.RolesProduce {
		t.Fatalf("after revokes: %v", g)
	}
	if n := st.GrantCount(); n != 2 {
		t.Fatalf("GrantCount %d, want 2", n)
	}
	st = step(func(st *State) { st.RemoveTopic("orders") })
	if _, ok := st.Users["alice"].Grants["orders"]; ok || st.Users["bob"].Grants != nil {
		t.Fatalf("grants on a deleted topic remain: %+v", st.Users)
	}
	st = step(func(st *State) { st.RemoveUser("bob") })
	if _, ok := st.Users["bob"]; ok || st.Topics["ticks"].User != "" {
		t.Fatalf("after RemoveUser: users %v, ticks' user %q", st.Users, st.Topics["ticks"].User)
	}
}
