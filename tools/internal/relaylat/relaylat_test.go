package relaylat

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"os"
	"strings"
	"sync/atomic"
	"testing"
)

// TestMain: relaylat starts a copy of its own executable as the relay, which in a test is the
// test binary; with childEnv set, that copy runs as relaylat instead of running the tests.
func TestMain(m *testing.M) {
	const childEnv = "RELAYLAT_TEST_AS_MAIN"
	if os.Getenv(childEnv) == "1" {
		os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Setenv(childEnv, "1")
	os.Exit(m.Run())
}

// TestRun: a short run end to end, relay process and all. Every message arrived once and in
// order (the consumer checks, and the tool fails otherwise), and the figures are consistent.
// Nothing here depends on how fast the machine is.
func TestRun(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Main([]string{"-json", "-count", "2000", "-rate", "20000", "-timeout", "60s"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d, stderr: %s", code, errb.String())
	}
	var r result
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("output %q: %v", out.String(), err)
	}
	t.Logf("%+v", r)
	if r.Messages != 2000 || r.Size != 100 || r.Rate != 20000 {
		t.Errorf("messages %d size %d rate %d, want 2000 100 20000", r.Messages, r.Size, r.Rate)
	}
	if !(r.Seconds > 0 && r.MsgsPerSec > 0 && r.RelayReads > 0 && r.RelayReads <= 2000*100) {
		t.Errorf("seconds %v msgs_per_sec %v relay_reads %d", r.Seconds, r.MsgsPerSec, r.RelayReads)
	}
	for _, s := range [][]float64{{r.P50Us, r.P90Us, r.P99Us, r.P999Us, r.MaxUs}, {r.SendP50Us, r.SendP99Us, r.SendP999Us, r.SendMaxUs}} {
		if !(s[0] > 0) {
			t.Errorf("percentiles %v: not positive", s)
		}
		for i := 1; i < len(s); i++ {
			if s[i] < s[i-1] {
				t.Errorf("percentiles %v: not ordered", s)
			}
		}
	}
	// Each message is written at or after its slot, so each percentile from the write is at
	// most the one from the slot (HDR buckets are 0.1 % wide, hence the slack).
	for _, p := range [][2]float64{{r.SendP50Us, r.P50Us}, {r.SendP99Us, r.P99Us}, {r.SendP999Us, r.P999Us}, {r.SendMaxUs, r.MaxUs}} {
		if p[0] > p[1]*1.002+1 {
			t.Errorf("from the write %v > from the slot %v", p[0], p[1])
		}
	}
	if r.CPUSeconds <= 0 || r.RelayCPUSeconds <= 0 {
		t.Errorf("cpu_s %v relay_cpu_s %v, want > 0", r.CPUSeconds, r.RelayCPUSeconds)
	}
}

// TestTextOutput: without -json, one line of key=value pairs with every figure.
func TestTextOutput(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Main([]string{"-count", "100", "-rate", "20000", "-size", "16", "-timeout", "60s"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d, stderr: %s", code, errb.String())
	}
	s := out.String()
	if strings.Count(s, "\n") != 1 || !strings.HasPrefix(s, "messages=100 size=16 rate=20000 ") {
		t.Errorf("output %q", s)
	}
	for _, k := range []string{"msgs_per_sec", "p50_us", "p90_us", "p99_us", "p999_us", "max_us", "send_p50_us", "send_p99_us",
		"send_p999_us", "send_max_us", "relay_reads", "cpu_s", "relay_cpu_s"} {
		if !strings.Contains(s, " "+k+"=") {
			t.Errorf("output lacks %s: %q", k, s)
		}
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-size", "15"}, {"-size", "2000000"}, {"-rate", "0"}, {"-rate", "-5"}, {"-count", "-1"},
		{"-count", "99999999"}, {"-duration", "0"}, {"-duration", "-1s"}, {"-rate", "1000000000", "-duration", "1h"},
		{"-timeout", "0"}, {"-nosuch"}, {"extra"}, {"-rate", "x"},
	} {
		var out, errb bytes.Buffer
		if code := Main(args, &out, &errb); code != 2 || errb.Len() == 0 || out.Len() != 0 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 with a message", args, code, out.String(), errb.String())
		}
	}
	var out, errb bytes.Buffer
	if code := Main([]string{"-h"}, &out, &errb); code != 0 {
		t.Errorf("-h: exit %d", code)
	}
}

// TestConsumeChecksOrder: the consumer accepts exactly the messages 0..count-1 in order and
// refuses a gap, a duplicate, a reordering, a torn message, a short or a long stream.
func TestConsumeChecksOrder(t *testing.T) {
	const size = 20
	stream := func(seqs ...uint64) []byte {
		var b []byte
		for _, s := range seqs {
			m := make([]byte, size)
			binary.BigEndian.PutUint64(m, 1) // sent at 1 ns after the epoch: a huge latency, clamped
			binary.BigEndian.PutUint64(m[8:], s)
			b = append(b, m...)
		}
		return b
	}
	sends := make([]atomic.Int64, 4)
	sends[1].Store(1)
	cs, err := consume(bytes.NewReader(stream(0, 1, 2, 3)), size, 4, sends)
	if err != nil || cs.received != 4 || cs.hist.TotalCount() != 4 || cs.sendHist.TotalCount() != 1 {
		t.Fatalf("in order: %v %+v", err, cs)
	}
	if cs.hist.Max() < histMaxUs/2 {
		t.Errorf("out-of-range latency not clamped to the top: max %d", cs.hist.Max())
	}
	for name, b := range map[string][]byte{
		"gap":       stream(0, 2, 3),
		"duplicate": stream(0, 1, 1, 2),
		"reordered": stream(0, 2, 1, 3),
		"short":     stream(0, 1, 2),
		"long":      stream(0, 1, 2, 3, 4),
		"torn":      stream(0, 1, 2, 3)[:4*size-1],
		"empty":     nil,
	} {
		if _, err := consume(bytes.NewReader(b), size, 4, sends); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
