package diskref

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
)

// TestRun: each policy writes every byte into segments of the given size, rolls where the
// broker would, syncs as its policy says, and leaves no file behind.
func TestRun(t *testing.T) {
	const write, segment, batches = 64 << 10, 1 << 20, 48 // 3 MiB: 16 batches a segment, 2 rolls
	cases := []struct {
		name     string
		policy   policy
		interval time.Duration
		inflight int
	}{
		{"always, 2 in flight", syncAlways, 0, 2},
		{"always, 16 in flight", syncAlways, 0, 16},
		{"interval", syncInterval, time.Millisecond, 0},
		{"never", syncNever, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := config{dir: dir, total: batches * write, write: write, segment: segment, policy: c.policy,
				interval: c.interval, inflight: max(c.inflight, 1), checkpointEvery: time.Second}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			r, err := run(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if r.Bytes != cfg.total || r.Writes != batches || r.Rolls != 2 || !(r.Seconds > 0) || !(r.MBPerSec > 0) {
				t.Errorf("result %+v", *r)
			}
			// A roll syncs the segment, two index files, the directory and the checkpoint.
			if r.SmallSyncs < 2*4 {
				t.Errorf("%d small syncs for 2 rolls, want at least 8", r.SmallSyncs)
			}
			switch c.policy {
			case syncAlways:
				// A sync covers what was written before it began, and the writer is never more
				// than inflight batches ahead of the last sync: at least batches/inflight syncs.
				if want := int64(batches / c.inflight); r.Syncs < want {
					t.Errorf("%d syncs, want at least %d with %d in flight", r.Syncs, want, c.inflight)
				}
			case syncNever:
				if r.Syncs != 2 {
					t.Errorf("%d syncs, want the 2 rolls'", r.Syncs)
				}
			}
			if left, _ := os.ReadDir(dir); len(left) != 0 {
				t.Errorf("files left behind: %v", left)
			}
		})
	}
}

// TestRunCancelled: a cancelled run fails, and still removes its files.
func TestRunCancelled(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := run(ctx, config{dir: dir, total: 8 << 20, write: 64 << 10, segment: 1 << 20, policy: syncAlways, inflight: 1, checkpointEvery: time.Second})
	if err == nil {
		t.Fatal("a cancelled run did not fail")
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("files left behind: %v", left)
	}
}

func TestMainFlags(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	if code := Main([]string{"-dir", dir, "-bytes", "1MiB", "-write", "64KiB", "-segment", "256KiB", "-sync", "interval=5ms", "-call", "fsync", "-json"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var r result
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("not JSON: %v: %s", err, out.String())
	}
	if r.Bytes != 1<<20 || r.Sync != "interval=5ms" || r.Call != "fsync" || r.Rolls != 3 || r.WriteSize != 64<<10 {
		t.Errorf("result %+v", r)
	}
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"-bytes", "1MiB"}, 2, "-dir is required"},
		{[]string{"-dir", dir, "-sync", "sometimes"}, 2, "want always, interval=<duration> or never"},
		{[]string{"-dir", dir, "-sync", "interval=2h"}, 2, "from 1ms to 1h"},
		{[]string{"-dir", dir, "-write", "2MiB", "-segment", "1MiB"}, 2, "smaller than -write"},
		{[]string{"-dir", dir, "-call", "sync"}, 2, "want fdatasync or fsync"},
		{[]string{"-dir", dir, "-bytes", "0"}, 2, "must be positive"},
		{[]string{"-dir", dir, "extra"}, 2, "unexpected argument"},
		{[]string{"-dir", dir, "-bytes", "1000TB"}, 1, "refusing to start: not enough free disk space"},
	} {
		var out, errb bytes.Buffer
		if code := Main(c.args, &out, &errb); code != c.code || !strings.Contains(errb.String(), c.msg) {
			t.Errorf("%v: exit %d, %q; want %d, %q", c.args, code, errb.String(), c.code, c.msg)
		}
	}
}
