package wire_test

import (
	"bytes"
	"slices"
	"testing"

	"github.com/lightq/lightq/wire"
)

// groupBodies are the consumer group body types, for FuzzGroupBodies.
var groupBodies = []func() wireBody{
	func() wireBody { return new(wire.JoinGroup) },
	func() wireBody { return new(wire.JoinGroupResponse) },
	func() wireBody { return new(wire.Heartbeat) },
	func() wireBody { return new(wire.HeartbeatResponse) },
	func() wireBody { return new(wire.LeaveGroup) },
	func() wireBody { return new(wire.GroupCommit) },
	func() wireBody { return new(wire.ListGroups) },
	func() wireBody { return new(wire.ListGroupsResponse) },
	func() wireBody { return new(wire.DescribeGroup) },
	func() wireBody { return new(wire.DescribeGroupResponse) },
	func() wireBody { return new(wire.FindCoordinator) },
	func() wireBody { return new(wire.FindCoordinatorResponse) },
}

// FuzzGroupBodies: a consumer group body that decodes re-encodes to exactly its bytes, and
// what it holds keeps the rules the broker and the clients rely on: member ids are not zero,
// partition lists are strictly ascending and at most MaxPartitions long, groups are valid
// names.
func FuzzGroupBodies(f *testing.F) {
	for _, tc := range bodyCases() {
		for i, nb := range groupBodies {
			if sameType(nb(), tc.newBody()) {
				f.Add(uint8(i), tc.msg.AppendTo(nil))
			}
		}
	}
	for _, ex := range protocolExamples() {
		h, body, _ := wire.ParseFrame(ex.frame)
		nb, _ := bodyFor(h.Op, h.Flags)
		for i, gb := range groupBodies {
			if nb != nil && sameType(nb(), gb()) {
				f.Add(uint8(i), body)
			}
		}
	}
	f.Fuzz(func(t *testing.T, kind uint8, data []byte) {
		m := groupBodies[int(kind)%len(groupBodies)]()
		if err := m.Decode(data); err != nil {
			return
		}
		if re := m.AppendTo(nil); !bytes.Equal(re, data) {
			t.Fatalf("%T: Decode then AppendTo is not the identity:\n in  % x\n out % x", m, data, re)
		}
		ascending := func(what string, ps []uint32) {
			if len(ps) > wire.MaxPartitions {
				t.Fatalf("%T %s: %d partitions", m, what, len(ps))
			}
			for i := 1; i < len(ps); i++ {
				if ps[i] <= ps[i-1] {
					t.Fatalf("%T %s: %v is not strictly ascending", m, what, ps)
				}
			}
		}
		member := func(id wire.MemberID) {
			if id.IsZero() {
				t.Fatalf("%T: a zero member id decoded", m)
			}
		}
		group := func(g string) {
			if err := wire.ValidGroupName(g); err != nil {
				t.Fatalf("%T: group %q decoded: %v", m, g, err)
			}
		}
		switch m := m.(type) {
		case *wire.JoinGroup:
			member(m.Member)
			group(m.Group)
		case *wire.Heartbeat:
			member(m.Member)
			group(m.Group)
			ascending("owned", m.Owned)
		case *wire.LeaveGroup:
			member(m.Member)
			group(m.Group)
		case *wire.GroupCommit:
			member(m.Member)
			group(m.Group)
		case *wire.DescribeGroup:
			group(m.Group)
		case *wire.FindCoordinator:
			group(m.Group)
		case *wire.JoinGroupResponse:
			ascending("assignment", m.Partitions)
		case *wire.HeartbeatResponse:
			ascending("assignment", m.Partitions)
		case *wire.DescribeGroupResponse:
			for _, g := range m.Members {
				member(g.Member)
				ascending("assigned", g.Assigned)
				ascending("revoking", g.Revoking)
			}
			if len(m.Partitions) > wire.MaxPartitions {
				t.Fatalf("%d partitions", len(m.Partitions))
			}
		}
	})
}

func TestMemberIDText(t *testing.T) {
	id := testMember
	s := id.String()
	if s != "deadbeef0102030405060708090a0b0c" {
		t.Fatalf("String = %s", s)
	}
	back, err := wire.ParseMemberID(s)
	if err != nil || back != id {
		t.Fatalf("ParseMemberID(%s) = %v, %v", s, back, err)
	}
	for _, bad := range []string{"", "dead", s + "00", "zz" + s[2:]} {
		if _, err := wire.ParseMemberID(bad); err == nil {
			t.Errorf("ParseMemberID(%q) accepted", bad)
		}
	}
}

func TestGroupListingSize(t *testing.T) {
	g := wire.GroupListing{Group: "billing", Topic: "audit", Members: 1}
	m := wire.ListGroupsResponse{Groups: []wire.GroupListing{g}}
	if got, want := len(m.AppendTo(nil)), 1+4+g.Size(); got != want {
		t.Fatalf("encoded %d bytes, Size says %d", got, want)
	}
}

// TestCodesSorted: Codes lists every code once, in order, with the gaps between areas (the
// numbers are allocated per feature).
func TestCodesSorted(t *testing.T) {
	cs := wire.Codes()
	if !slices.IsSorted(cs) || len(slices.Compact(slices.Clone(cs))) != len(cs) {
		t.Fatalf("Codes() = %v", cs)
	}
	if !slices.Contains(cs, wire.CodeGroupNotEmpty) || !slices.Contains(cs, wire.CodeMalformedFrame) {
		t.Fatalf("Codes() = %v misses codes", cs)
	}
}
