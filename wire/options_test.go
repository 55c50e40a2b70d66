package wire_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/lightq/lightq/wire"
)

// TestOptionKeysDocumented: every topic option key has its row in PROTOCOL.md's table of the
// options this broker knows, and every row has its key, so the constants and the contract
// cannot drift apart.
func TestOptionKeysDocumented(t *testing.T) {
	doc, err := os.ReadFile(protocolDoc)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{ // key: its kind's column
		wire.OptionRingBytes:         "transient",
		wire.OptionRingSlots:         "transient",
		wire.OptionFsync:             "durable",
		wire.OptionSegmentBytes:      "durable",
		wire.OptionSegmentMs:         "durable",
		wire.OptionRetentionBytes:    "durable",
		wire.OptionRetentionMs:       "durable",
		wire.OptionReplicationFactor: "durable",
	}
	rows := regexp.MustCompile("(?m)^ *\\| (transient|durable) \\| `").FindAll(doc, -1)
	if len(rows) != len(keys) {
		t.Errorf("PROTOCOL.md lists %d topic options, wire has %d constants", len(rows), len(keys))
	}
	for key, kind := range keys {
		row := "| " + kind + " | `" + key + "` |"
		if !strings.Contains(string(doc), row) {
			t.Errorf("PROTOCOL.md has no option row %q", row)
		}
	}
}
