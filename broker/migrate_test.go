package broker

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/lightq/lightq/broker/meta"
	"github.com/lightq/lightq/wire"
)

// v1DataDir is a data dir written by the broker of f02ffc2, whose metadata is format 1 (one
// owner user per topic): testdata/gen-v1-datadir.sh made it and says what is in it.
const v1DataDir = "testdata/v1-datadir"

// TestMigrateV1DataDir: today's broker starts on a data dir the previous format wrote. Each
// topic's user holds both roles on it and nothing else, passwords and data are as they were,
// the old metadata file is kept next to the new one, and a second start migrates nothing.
func TestMigrateV1DataDir(t *testing.T) {
	cfg := testConfig(t)
	cfg.AdminPassword = "v1-admin-pw" // the fixture's
	if err := os.CopyFS(cfg.DataDir, os.DirFS(v1DataDir)); err != nil {
		t.Fatal(err)
	}
	old, err := os.ReadFile(filepath.Join(v1DataDir, meta.FileName))
	if err != nil || !bytes.Contains(old, []byte(`"format_version": 1`)) {
		t.Fatalf("the fixture is not a format 1 file (%v)", err)
	}
	srv := startWith(t, cfg)
	if srv.meta.MigratedFrom() != 1 {
		t.Fatalf("MigratedFrom = %d, want 1", srv.meta.MigratedFrom())
	}
	if backup, err := os.ReadFile(filepath.Join(cfg.DataDir, meta.BackupV1)); err != nil || !bytes.Equal(backup, old) {
		t.Fatalf("the old file is not kept as %s: %v", meta.BackupV1, err)
	}
	if now, _ := os.ReadFile(filepath.Join(cfg.DataDir, meta.FileName)); !bytes.Contains(now, []byte(`"format_version": 2`)) {
		t.Fatalf("meta.json after the start:\n%s", now)
	}
	check := func(srv *Server) {
		t.Helper()
		a := login(t, srv.Addr(), testAdminUser, "v1-admin-pw")
		want := []wire.UserRoles{
			{User: "admin", Roles: wire.RolesAdmin},
			{User: "auditor"}, {User: "auditor", Topic: "audit", Roles: wire.RolesBoth},
			{User: "shop"}, {User: "shop", Topic: "live", Roles: wire.RolesBoth}, {User: "shop", Topic: "orders", Roles: wire.RolesBoth},
		}
		if got := listUsers(t, a, wire.ListUsers{}); !reflect.DeepEqual(got, want) {
			t.Fatalf("users after the migration:\n got %+v\nwant %+v", got, want)
		}
		md := wire.MetadataRequest{}
		var resp wire.MetadataResponse
		if err := resp.Decode(a.expectResponse(wire.OpMetadata, a.send(wire.OpMetadata, md.AppendTo(nil)))); err != nil {
			t.Fatal(err)
		}
		users := map[string]string{}
		for _, tm := range resp.Topics {
			users[tm.Name] = tm.User
		}
		if !reflect.DeepEqual(users, map[string]string{"audit": "auditor", "live": "shop", "orders": "shop"}) {
			t.Fatalf("topics and their users: %v", users)
		}

		shop := login(t, srv.Addr(), "shop", "shop-pw")
		for p, want := range [][]string{{"a", "b", "c"}, {"d", "e"}} {
			if _, got := shop.fetchValues("orders", uint32(p), 0, 0); !slices.Equal(got, want) {
				t.Fatalf("orders partition %d: %q, want %q", p, got, want)
			}
		}
		fc := wire.FetchCommitted{Group: "billing", Topic: "orders"}
		var off wire.OffsetResponse
		if err := off.Decode(shop.expectResponse(wire.OpFetchCommitted, shop.send(wire.OpFetchCommitted, fc.AppendTo(nil)))); err != nil || off.Offset != 2 {
			t.Fatalf("billing's committed offset: %d, %v; want 2", off.Offset, err)
		}
		shop.subscribe("live", wire.PartitionAny, "", 1<<20)
		shop.produce("live", 0, testBatch(t, "after the upgrade"))
		if d := shop.readDeliver(); !slices.Equal(d.values, []string{"after the upgrade"}) {
			t.Fatalf("live: %q", d.values)
		}
		shop.expectError(shop.send(wire.OpFetch, (&wire.Fetch{Topic: "audit", MaxBytes: 1 << 20}).AppendTo(nil)), wire.CodeNotAuthorized)

		auditor := login(t, srv.Addr(), "auditor", "audit-pw")
		if _, got := auditor.fetchValues("audit", 0, 0, 0); !slices.Equal(got, []string{"x"}) {
			t.Fatalf("audit: %q", got)
		}
		auditor.expectError(auditor.send(wire.OpProduce, produceBody("orders", 0, wire.AcksWritten, testBatch(t, "no"))), wire.CodeNotAuthorized)
	}
	check(srv)
	if err := srv.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	srv = startWith(t, cfg)
	if srv.meta.MigratedFrom() != 0 {
		t.Fatalf("second start: MigratedFrom = %d, want 0", srv.meta.MigratedFrom())
	}
	check(srv)
}

// TestDamagedMetadataRefusesToStart: a metadata file that does not decode stops New with an
// error that names the file, instead of a broker without its users and topics.
func TestDamagedMetadataRefusesToStart(t *testing.T) {
	for name, damage := range map[string]func([]byte) []byte{
		"truncated":   func(b []byte) []byte { return b[:len(b)/2] },
		"bit flipped": func(b []byte) []byte { b[bytes.Index(b, []byte(`"shop"`))+2] ^= 0x01; return b },
	} {
		t.Run(name, func(t *testing.T) {
			cfg := testConfig(t)
			if err := os.CopyFS(cfg.DataDir, os.DirFS(v1DataDir)); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(cfg.DataDir, meta.FileName)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, damage(data), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err = New(cfg)
			if err == nil {
				t.Fatal("New accepted a damaged metadata file")
			}
			t.Log(err)
			if !bytes.Contains([]byte(err.Error()), []byte(path)) {
				t.Fatalf("the error does not name %s: %v", path, err)
			}
		})
	}
}
