package broker

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/lightq/lightq/broker/meta"
	qlog "github.com/lightq/lightq/log"
	"github.com/lightq/lightq/wire"
)

// A log error reaches the client as its code and a text that names the partition and the
// sentinel's meaning, never the server's file paths.
func TestStorageMessageNamesNoPath(t *testing.T) {
	const path = "/srv/lightq/data/topics/events/0/00000000000000000000.log"
	for _, tc := range []struct {
		err  error
		code wire.Code
		want string
	}{
		{fmt.Errorf("%w: %s at 4096: bad CRC", qlog.ErrCorrupt, path), wire.CodeStorageError, "damaged"},
		{fmt.Errorf("partition 0 cannot be served: %w", fmt.Errorf("%w: %s", qlog.ErrCorrupt, path)), wire.CodeStorageError, "damaged"},
		{fmt.Errorf("%w: fsync %s: input/output error", qlog.ErrBroken, path), wire.CodeStorageError, "stopped taking writes"},
		{fmt.Errorf("%w: write %s", qlog.ErrStorageFull, path), wire.CodeStorageFull, "disk is full"},
		{&qlog.RangeError{Offset: 99, Start: 0, Next: 5}, wire.CodeOffsetOutOfRange, "offset 99 is outside the log, which holds [0, 5)"},
		{fmt.Errorf("%s: %w", path, &qlog.RangeError{Offset: 99, Start: 0, Next: 5}), wire.CodeOffsetOutOfRange, "offset 99 is outside the log, which holds [0, 5)"},
		{fmt.Errorf("read %s: %w", path, qlog.ErrOffsetOutOfRange), wire.CodeOffsetOutOfRange, "offset out of range"},
		{qlog.ErrClosed, wire.CodeUnknownTopic, "deleted"},
		{fmt.Errorf("log: read %s at 12: %w", path, errors.New("EIO")), wire.CodeStorageError, "storage error"},
	} {
		msg := storageMessage("events", 3, tc.err)
		if strings.Contains(msg, "/srv") || !strings.Contains(msg, tc.want) || !strings.Contains(msg, `topic "events" partition 3`) {
			t.Errorf("storageMessage(%v) = %q, want it to say %q and name no path", tc.err, msg, tc.want)
		}
		if code := storageCode(tc.err); code != tc.code {
			t.Errorf("storageCode(%v) = %s, want %s", tc.err, code, tc.code)
		}
	}
	if msg := storageMessage("", 2, qlog.ErrBroken); !strings.HasPrefix(msg, "partition 2: ") {
		t.Errorf("without a topic: %q", msg)
	}
}

// A failed topic change reaches the client as its own code, as INVALID_REQUEST when meta
// refuses the state (never STORAGE_ERROR for a bad value), and as STORAGE_ERROR without the
// server's paths when a file could not be written.
func TestReplyForNamesNoPath(t *testing.T) {
	const path = "/srv/lightq/data/meta.json.tmp-123"
	for _, tc := range []struct {
		err   error
		code  wire.Code
		want  string
		logIt bool
	}{
		{answer(wire.CodeTopicExists, "topic %q exists", "t"), wire.CodeTopicExists, `topic "t" exists`, false},
		{fmt.Errorf("%w: user %q: %v", meta.ErrInvalid, "a\x00b", "control character"), wire.CodeInvalidRequest, "control character", true},
		{fmt.Errorf("meta: syncing %s: %w", path, errors.New("input/output error")), wire.CodeStorageError, "could not store", true},
		{fmt.Errorf("%w: meta: renaming %s", meta.ErrBroken, path), wire.CodeStorageError, "could not store", true},
	} {
		code, msg, logIt := replyFor(tc.err)
		if code != tc.code || !strings.Contains(msg, tc.want) || strings.Contains(msg, "/srv") || logIt != tc.logIt {
			t.Errorf("replyFor(%v) = %s %q log %v; want %s, a text with %q and no path, log %v", tc.err, code, msg, logIt, tc.code, tc.want, tc.logIt)
		}
	}
}
