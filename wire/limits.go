package wire

import (
	"fmt"
	"time"
	"unicode"
	"unicode/utf8"
)

// Limits are the sizes and deadlines the broker enforces. The broker announces them in its
// HELLO response so that they live in one place; clients size their batches from them.
type Limits struct {
	MaxFrame        int           // largest frame, header included
	MaxBatch        int           // largest record batch
	MaxMessage      int           // largest key+value+headers of one record
	PreAuthMaxFrame int           // largest frame before AUTH succeeds
	AuthTimeout     time.Duration // time from connect to a successful AUTH
}

// DefaultLimits are the broker's defaults.
func DefaultLimits() Limits {
	return Limits{
		MaxFrame:        1<<20 + 1024,
		MaxBatch:        1 << 20,
		MaxMessage:      1<<20 - 1024,
		PreAuthMaxFrame: 4096,
		AuthTimeout:     10 * time.Second,
	}
}

// Validate checks that the limits are consistent.
func (l Limits) Validate() error {
	switch {
	case l.MaxBatch < 4096 || l.MaxBatch > 256<<20:
		return fmt.Errorf("max batch %d outside [4096, 256 MiB]", l.MaxBatch)
	case l.MaxFrame < l.MaxBatch+1024:
		return fmt.Errorf("max frame %d must be at least max batch + 1024 (%d)", l.MaxFrame, l.MaxBatch+1024)
	case l.MaxMessage < 1 || l.MaxMessage > l.MaxBatch-MaxBatchHeaderSize-32:
		return fmt.Errorf("max message %d must be in [1, max batch - %d]", l.MaxMessage, MaxBatchHeaderSize+32)
	case l.PreAuthMaxFrame < 512 || l.PreAuthMaxFrame > l.MaxFrame:
		return fmt.Errorf("pre-auth max frame %d outside [512, max frame]", l.PreAuthMaxFrame)
	case l.AuthTimeout <= 0:
		return fmt.Errorf("auth timeout must be positive")
	}
	return nil
}

// Field limits of request bodies.
const (
	MaxTopicName   = 249
	MaxUser        = 255
	MaxPassword    = 1024
	MaxClientName  = 255
	MaxGroupName   = 255
	MaxOptions     = 64
	MaxOptionKey   = 64
	MaxOptionValue = 255
	MaxPartitions  = 1024
	MaxErrorText   = 1024
	MaxListTopics  = 10000
)

// Names. Each kind of name has its rule here, and only here: the broker applies them where a
// name is created (CREATE_TOPIC's topic and user, a consumer or queue group in the decoders of
// SUBSCRIBE, COMMIT_OFFSET and FETCH_COMMITTED), package meta checks them again on what it
// stores, and clients may check them before sending. A name that is only looked up (AUTH's
// user, the topic of most requests) needs no rule: a name that breaks one names nothing.

// ValidTopicName reports why name cannot name a topic, or nil. Names are 1-249 bytes of
// [A-Za-z0-9._-], not "." or "..", so they are safe as directory names.
func ValidTopicName(name string) error {
	if len(name) == 0 || len(name) > MaxTopicName {
		return fmt.Errorf("topic name must be 1-%d bytes, got %d", MaxTopicName, len(name))
	}
	if name == "." || name == ".." {
		return fmt.Errorf("topic name %q is reserved", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("topic name %q: byte %d (%q) is not one of [A-Za-z0-9._-]", name, i, c)
		}
	}
	return nil
}

// ValidUserName reports why name cannot name a topic user, or nil: 1-255 bytes of UTF-8
// without control characters (U+0000-U+001F, U+007F-U+009F), so that it is stored, logged and
// shown as it is.
func ValidUserName(name string) error { return validText("user name", name, MaxUser) }

// ValidGroupName reports why name cannot name a consumer group (COMMIT_OFFSET,
// FETCH_COMMITTED) or a queue group (SUBSCRIBE, where the empty group means fan-out and is not
// a name), or nil: 1-255 bytes of UTF-8 without control characters. Committed offsets are
// stored under the name, so two different names must stay different on disk: invalid UTF-8
// would not.
func ValidGroupName(name string) error { return validText("group name", name, MaxGroupName) }

// validText checks a name of printable UTF-8 of 1 to max bytes.
func validText(what, name string, max int) error {
	if len(name) == 0 || len(name) > max {
		return fmt.Errorf("%s must be 1-%d bytes, got %d", what, max, len(name))
	}
	if !utf8.ValidString(name) {
		return fmt.Errorf("%s %q is not valid UTF-8", what, name)
	}
	for i, r := range name {
		if unicode.IsControl(r) {
			return fmt.Errorf("%s %q: byte %d is the control character %U", what, name, i, r)
		}
	}
	return nil
}
