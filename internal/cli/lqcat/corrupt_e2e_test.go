package lqcat

// -C on a durable topic whose log holds batches that cannot be decoded: written into the log
// of a stopped broker (a broker that checks records refuses them on PRODUCE), or damaged there
// as a faulty disk would, then read after a restart.

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lightq/lightq/broker/brokertest"
	"github.com/lightq/lightq/internal/poisontest"
	"github.com/lightq/lightq/log"
	"github.com/lightq/lightq/wire"
)

// newPoisonEnv is newEnv with a durable topic "d" of one partition whose log write changes
// while the broker is stopped; the broker then starts again on the same data directory.
func newPoisonEnv(t *testing.T, write func(dir string)) *env {
	t.Helper()
	cfg := brokertest.Config(t)
	cfg.AdminUser, cfg.AdminPassword = "admin", adminPass
	cfg.ShutdownDrain = 200 * time.Millisecond
	srv := brokertest.StartWith(t, cfg)
	e := &env{t: t, addr: srv.Addr(), vars: map[string]string{
		"LIGHTQ_BROKER": srv.Addr(), "LIGHTQ_USER": userName, "LIGHTQ_PASSWORD": userPass, "LIGHTQ_ADMIN_PASSWORD": adminPass,
	}}
	e.topic("d", "durable", 1)
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	write(poisontest.PartitionDir(cfg.DataDir, "d", 0))
	srv = brokertest.StartWith(t, cfg)
	e.addr, e.vars["LIGHTQ_BROKER"] = srv.Addr(), srv.Addr()
	return e
}

// TestConsumeCorruptBatches: lqcat -C prints what decodes, says on stderr which offsets it
// skipped and why, goes on to the end (-e ends although the last batch is a bad one), and
// exits 1; --on-corrupt stop stops at the first; a group's commit covers what was skipped.
func TestConsumeCorruptBatches(t *testing.T) {
	var bases []int64
	e := newPoisonEnv(t, func(dir string) {
		bases = poisontest.Append(t, dir, log.Options{SegmentBytes: 1}, // a segment each: sealed but the last
			poisontest.Batch(1000, "a0", "a1"), // 0-1
			poisontest.CountMismatch(),         // 2-4: two records, then the third is missing
			poisontest.Batch(2000, "b0"),       // 5: damaged below
			poisontest.GarbageRecords(),        // 6-7
			poisontest.Batch(3000, "c0"),       // 8
			poisontest.ZstdGarbage(),           // 9-10, the end of the log
		)
		poisontest.Damage(t, dir, bases[2], poisontest.FlipRecordsByte) // a faulty disk: CRC mismatch
	})
	if bases[5] != 9 {
		t.Fatalf("base offsets %v", bases)
	}
	const printed = "0 a0\n1 a1\n2 count-1\n3 count-2\n8 c0\n"
	skipped := []string{
		`lqcat: warning: topic "d" partition 0 offsets 4-4: cannot decode batch: .*truncated varint.*; skipped`,
		`lqcat: warning: topic "d" partition 0 offsets 5-5: cannot decode batch: corrupt record batch: CRC-32C mismatch .*; skipped`,
		`lqcat: warning: topic "d" partition 0 offsets 6-7: cannot decode batch: .*varint.*; skipped`,
		`lqcat: warning: topic "d" partition 0 offsets 9-10: cannot decode batch: corrupt record batch: zstd: .*; skipped`,
		`lqcat: topic "d": 4 batches could not be decoded and were skipped \(see above\)`,
	}
	stderrIs := func(what, got string, want []string) {
		t.Helper()
		lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
		if len(lines) != len(want) {
			t.Fatalf("%s: stderr\n%s\nwant %d lines", what, got, len(want))
		}
		for i, re := range want {
			if !regexp.MustCompile("^" + re + "$").MatchString(lines[i]) {
				t.Errorf("%s: stderr line %d\n%s\nwant %s", what, i+1, lines[i], re)
			}
		}
	}

	r := e.run("", "-C", "-t", "d", "-e", "-f", `%o %s\n`)
	if r.code != ExitFailed || r.out != printed {
		t.Fatalf("-e: exit %d, stdout\n%s", r.code, r.out)
	}
	stderrIs("-e", r.err, skipped)

	// -q keeps the summary (and the exit code).
	r = e.run("", "-C", "-t", "d", "-e", "-q", "-f", `%o %s\n`)
	if r.code != ExitFailed || r.out != printed {
		t.Fatalf("-e -q: exit %d, stdout\n%s", r.code, r.out)
	}
	stderrIs("-e -q", r.err, skipped[4:])

	// -c counts printed messages only; without -e lqcat ends once it has them.
	r = e.run("", "-C", "-t", "d", "-c", "5", "-f", `%o %s\n`)
	if r.code != ExitFailed || r.out != printed {
		t.Fatalf("-c 5: exit %d, stdout\n%s\nstderr\n%s", r.code, r.out, r.err)
	}

	r = e.run("", "-C", "-t", "d", "-e", "--on-corrupt", "stop", "-f", `%o %s\n`)
	if r.code != ExitFailed || r.out != "0 a0\n1 a1\n2 count-1\n3 count-2\n" {
		t.Fatalf("--on-corrupt stop: exit %d, stdout\n%s", r.code, r.out)
	}
	stderrIs("--on-corrupt stop", r.err, []string{`lqcat: lightq: topic d partition 0 offsets 4-4: cannot decode batch: .*truncated varint.*`})

	// A group commits past the skipped batches, the last one included.
	r = e.run("", "-C", "-t", "d", "-e", "-G", "g", "-f", `%o %s\n`)
	if r.code != ExitFailed || r.out != printed {
		t.Fatalf("-G g: exit %d, stdout\n%s", r.code, r.out)
	}
	off, err := e.admin().FetchCommitted(context.Background(), wire.FetchCommitted{Group: "g", Topic: "d"})
	if err != nil || off != 11 {
		t.Fatalf("group g committed %d (%v), want 11", off, err)
	}
	if got := e.ok("", "-C", "-t", "d", "-e", "-G", "g"); got != "" {
		t.Fatalf("-G g again: %q", got)
	}

	// -o s@: the batch holding the time decodes; the last one does not. (A time whose batch
	// is damaged gets STORAGE_ERROR from the broker's LIST_OFFSETS, which reads that batch.)
	r = e.run("", "-C", "-t", "d", "-e", "-o", "s@3000", "-f", `%o %s\n`)
	if r.code != ExitFailed || r.out != "8 c0\n" {
		t.Fatalf("-o s@3000: exit %d, stdout\n%s", r.code, r.out)
	}
	stderrIs("-o s@3000", r.err, []string{skipped[3], `lqcat: topic "d": 1 batch could not be decoded and was skipped \(see above\)`})

	e.expect(ExitUsage, `--on-corrupt "maybe": want skip or stop`, "", "-C", "-t", "d", "--on-corrupt", "maybe")
	e.expect(ExitUsage, "consumer flags", "x\n", "-P", "-t", "d", "--on-corrupt", "skip")
}
