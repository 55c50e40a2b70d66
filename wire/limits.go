package wire

import (
	"fmt"
	"time"
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
	case l.MaxMessage < 1 || l.MaxMessage > l.MaxBatch-BatchHeaderSize-32:
		return fmt.Errorf("max message %d must be in [1, max batch - %d]", l.MaxMessage, BatchHeaderSize+32)
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

// ValidTopicName reports why name cannot name a topic, or nil. Names are 1-249 bytes of
// [A-Za-z0-9._-], so they are safe as directory names.
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
