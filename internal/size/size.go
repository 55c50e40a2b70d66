// Package size parses byte sizes written with units, the one way every LightQ command and
// setting reads them: a plain integer is bytes; B, KB, MB, GB, TB are powers of 1000 and KiB,
// MiB, GiB, TiB powers of 1024 (so "64MiB" is 67108864 and "1GB" is 1000000000). Units are
// case-sensitive, as in "10GiB", and there is no space or fraction: "1.5GB" is an error.
//
// Sizes are parsed on the command-line side only (the broker's settings, lqcat, lqbench,
// lqdump): the wire's topic options stay plain integers (PROTOCOL.md), so a client parses a
// size and sends the integer.
//
// Its functions are safe for concurrent use.
package size

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/lightq/lightq/wire"
)

// units in the order Parse tries them: the binary ones first, so "MiB" is not read as "B".
var units = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1},
}

// Max is the largest size Parse accepts (2^62 bytes), far above any real setting, so that
// callers may add to a size without overflowing.
const Max = 1 << 62

// Parse reads a non-negative size: "1048576", "512KiB", "100MB". The error says what was
// wrong and which units are accepted.
func Parse(s string) (int64, error) {
	num, mult := s, int64(1)
	for _, u := range units {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			num, mult = n, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || num == "" || num[0] == '+' {
		return 0, fmt.Errorf("%q is not a size (want bytes as an integer, or with a unit: KB, MB, GB, TB or KiB, MiB, GiB, TiB)", s)
	}
	if n > Max/mult {
		return 0, fmt.Errorf("%q is too large (at most %d bytes)", s, int64(Max))
	}
	return n * mult, nil
}

// ParseInt is Parse for a setting held in an int: on a 32-bit platform it refuses sizes
// above math.MaxInt instead of truncating them.
func ParseInt(s string) (int, error) {
	n, err := Parse(s)
	if err != nil {
		return 0, err
	}
	if int64(int(n)) != n {
		return 0, fmt.Errorf("%q is too large for this platform (at most %d bytes)", s, int64(^uint(0)>>1))
	}
	return int(n), nil
}

// Value is a flag.Value holding a size, for a flag registered with flag.Var: it accepts
// whatever Parse does and prints as plain bytes.
type Value int64

// String prints the size in bytes.
func (v *Value) String() string { return strconv.FormatInt(int64(*v), 10) }

// Set parses s with Parse.
func (v *Value) Set(s string) error {
	n, err := Parse(s)
	if err != nil {
		return err
	}
	*v = Value(n)
	return nil
}

// IntValue is Value for a size held in an int (see ParseInt).
type IntValue int

// String prints the size in bytes.
func (v *IntValue) String() string { return strconv.Itoa(int(*v)) }

// Set parses s with ParseInt.
func (v *IntValue) Set(s string) error {
	n, err := ParseInt(s)
	if err != nil {
		return err
	}
	*v = IntValue(n)
	return nil
}

// topicSizeOptions are the topic options whose values are sizes in bytes.
var topicSizeOptions = map[string]bool{wire.OptionSegmentBytes: true, wire.OptionRetentionBytes: true, wire.OptionRingBytes: true}

// TopicOption returns the wire value of the topic option key=value as a command line gave it:
// for the size options (segment.bytes, retention.bytes, ring.bytes) the size in plain bytes,
// as the broker takes it ("64MiB" becomes "67108864"); for any other key the value unchanged.
func TopicOption(key, value string) (string, error) {
	if !topicSizeOptions[key] {
		return value, nil
	}
	n, err := Parse(value)
	if err != nil {
		return "", fmt.Errorf("%s: %w", key, err)
	}
	return strconv.FormatInt(n, 10), nil
}
