package broker

import (
	"fmt"
	"strings"
	"testing"

	"github.com/lightq/lightq/broker/ring"
	"github.com/lightq/lightq/wire"
)

// TestRingSlotsCountAgainstRingMemory: CREATE_TOPIC counts each partition's slot index, not
// only its arena, against MaxRingMemory, refuses a topic past the cap with RESOURCE_LIMIT
// naming the numbers, and gets the memory back when a topic is deleted.
func TestRingSlotsCountAgainstRingMemory(t *testing.T) {
	const arena = 4 << 20
	perPartition := ring.Memory(arena, 1024)
	maxMemory := 4*perPartition - 1 // three default partitions fit, four do not
	srv := startBroker(t, func(c *Config) { c.RingBytes, c.RingSlots, c.MaxRingMemory = arena, 1024, maxMemory })
	admin := login(t, srv.Addr(), testAdminUser, testAdminPass)

	create := func(name string, partitions uint32, opts ...wire.Option) uint32 {
		m := wire.CreateTopic{Name: name, Kind: wire.KindTransient, Partitions: partitions, User: "u", Password: "pw", Options: opts}
		return admin.send(wire.OpCreateTopic, m.AppendTo(nil))
	}
	// A small arena with a million slots: 2 MiB of arena, 72 MiB of slot index (on 64-bit).
	// Counting only the arena let this through.
	corr := create("many-slots", 1, wire.Option{Key: wire.OptionRingBytes, Value: fmt.Sprint(2 << 20)}, wire.Option{Key: wire.OptionRingSlots, Value: fmt.Sprint(1 << 20)})
	eb := admin.expectError(corr, wire.CodeResourceLimit)
	need := ring.Memory(2<<20, 1<<20)
	for _, want := range []string{fmt.Sprint(need), fmt.Sprintf("%d slots x %d bytes", 1<<20, ring.SlotBytes), fmt.Sprint(maxMemory)} {
		if !strings.Contains(eb.Message, want) {
			t.Errorf("refusal %q does not name %q", eb.Message, want)
		}
	}

	admin.expectResponse(wire.OpCreateTopic, create("three", 3))
	eb = admin.expectError(create("one-more", 1), wire.CodeResourceLimit)
	if want := fmt.Sprintf("%d of the broker's %d are in use", 3*perPartition, maxMemory); !strings.Contains(eb.Message, want) {
		t.Errorf("refusal %q does not say %q", eb.Message, want)
	}
	corr = admin.send(wire.OpDeleteTopic, (&wire.TopicName{Name: "three"}).AppendTo(nil))
	admin.expectResponse(wire.OpDeleteTopic, corr)
	admin.expectResponse(wire.OpCreateTopic, create("one-more", 1))
}
