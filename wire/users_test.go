package wire_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/lightq/lightq/wire"
)

// TestUserBodyDecodeErrors: the bodies of the user requests refuse what breaks their limits,
// roles with undefined bits and a more flag other than 0 or 1. (Round trips and truncations
// are in TestBodyRoundTrip.)
func TestUserBodyDecodeErrors(t *testing.T) {
	long := func(n int, s string) []byte { return str(strings.Repeat(s, n)) }
	for _, tt := range []struct {
		name    string
		newBody func() wireBody
		in      []byte
	}{
		{"UserPassword user 256", func() wireBody { return new(wire.UserPassword) }, body(long(256, "u"), str("p"))},
		{"UserPassword password 1025", func() wireBody { return new(wire.UserPassword) }, body(str("u"), long(1025, "p"))},
		{"UserName user 256", func() wireBody { return new(wire.UserName) }, long(256, "u")},
		{"UserName trailing byte", func() wireBody { return new(wire.UserName) }, body(str("u"), u8(0))},
		{"Grant topic 250", func() wireBody { return new(wire.Grant) }, body(str("u"), long(250, "t"), u8(1))},
		{"Grant roles 0x08", func() wireBody { return new(wire.Grant) }, body(str("u"), str("t"), u8(0x08))},
		{"Grant roles 0xff", func() wireBody { return new(wire.Grant) }, body(str("u"), str("t"), u8(0xff))},
		{"Grant no roles byte", func() wireBody { return new(wire.Grant) }, body(str("u"), str("t"))},
		{"ListUsers after user 256", func() wireBody { return new(wire.ListUsers) }, body(str(""), str(""), long(256, "u"), str(""))},
		{"ListUsers after topic 250", func() wireBody { return new(wire.ListUsers) }, body(str(""), str(""), str(""), long(250, "t"))},
		{"ListUsers three fields", func() wireBody { return new(wire.ListUsers) }, body(str(""), str(""), str(""))},
		{"ListUsersResponse more 2", func() wireBody { return new(wire.ListUsersResponse) }, body(u8(2), u32(0))},
		{"ListUsersResponse count over bytes", func() wireBody { return new(wire.ListUsersResponse) }, body(u8(0), u32(2), str("a"), str(""), u8(0))},
		{"ListUsersResponse 4G entries", func() wireBody { return new(wire.ListUsersResponse) }, body(u8(1), u32(0xffffffff))},
		{"ListUsersResponse roles 0x10", func() wireBody { return new(wire.ListUsersResponse) }, body(u8(0), u32(1), str("a"), str(""), u8(0x10))},
		{"ListUsersResponse topic 250", func() wireBody { return new(wire.ListUsersResponse) }, body(u8(0), u32(1), str("a"), long(250, "t"), u8(1))},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.newBody().Decode(tt.in); !errors.Is(err, wire.ErrMalformed) {
				t.Fatalf("Decode: %v, want ErrMalformed", err)
			}
		})
	}
}

func TestRolesText(t *testing.T) {
	for _, tt := range []struct {
		r    wire.Roles
		text string
	}{
		{0, "none"},
		{wire.RolesProduce, "produce"},
		{wire.RolesConsume, "consume"},
		{wire.RolesBoth, "produce,consume"},
		{wire.RolesAdmin, "admin"},
		{wire.RolesAll, "produce,consume,admin"},
		{0x0a, "consume,0x08"},
	} {
		if got := tt.r.String(); got != tt.text {
			t.Errorf("Roles(%#x).String() = %q, want %q", uint8(tt.r), got, tt.text)
		}
	}
	for in, want := range map[string]wire.Roles{
		"produce": wire.RolesProduce, "consume": wire.RolesConsume, "both": wire.RolesBoth,
		"produce,consume": wire.RolesBoth, "consume, produce": wire.RolesBoth, "admin": wire.RolesAdmin,
		"both,produce": wire.RolesBoth,
	} {
		if got, err := wire.ParseRoles(in); err != nil || got != want {
			t.Errorf("ParseRoles(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "read", "produce,", "PRODUCE", "none"} {
		if r, err := wire.ParseRoles(bad); err == nil {
			t.Errorf("ParseRoles(%q) = %v, want an error", bad, r)
		}
	}
}
