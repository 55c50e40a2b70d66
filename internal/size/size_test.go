package size

import (
	"flag"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"0", 0}, {"1048576", 1 << 20}, {"17B", 17},
		{"1KB", 1000}, {"100MB", 100e6}, {"1GB", 1e9}, {"2TB", 2e12},
		{"1KiB", 1024}, {"64MiB", 64 << 20}, {"10GiB", 10 << 30}, {"1TiB", 1 << 40},
		{"4194304", 4 << 20},
	} {
		got, err := Parse(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "MiB", "-1", "+5", "1.5GB", "10 MiB", "10mib", "10M", "1e6", "ten", "5000000TiB", "99999999999999999999"} {
		if n, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) = %d, want an error", bad, n)
		} else if !strings.Contains(err.Error(), bad) {
			t.Errorf("Parse(%q): error %q does not quote the input", bad, err)
		}
	}
}

// TestValue: the flag types accept units and print plain bytes.
func TestValue(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	var big Value
	var small IntValue
	fs.Var(&big, "big", "")
	fs.Var(&small, "small", "")
	if err := fs.Parse([]string{"-big", "2GiB", "-small", "512KiB"}); err != nil {
		t.Fatal(err)
	}
	if big != 2<<30 || small != 512<<10 || big.String() != "2147483648" || small.String() != "524288" {
		t.Errorf("big %d (%s), small %d (%s)", big, big.String(), small, small.String())
	}
	if err := fs.Parse([]string{"-small", "lots"}); err == nil {
		t.Error("-small lots parsed")
	}
}

func TestTopicOption(t *testing.T) {
	for _, tc := range [][3]string{
		{"segment.bytes", "64MiB", "67108864"}, {"retention.bytes", "10GB", "10000000000"},
		{"ring.bytes", "4194304", "4194304"}, {"retention.ms", "1000", "1000"}, {"fsync", "always", "always"},
	} {
		if got, err := TopicOption(tc[0], tc[1]); err != nil || got != tc[2] {
			t.Errorf("TopicOption(%s, %s) = %q, %v; want %q", tc[0], tc[1], got, err, tc[2])
		}
	}
	if _, err := TopicOption("ring.bytes", "big"); err == nil || !strings.Contains(err.Error(), "ring.bytes") {
		t.Errorf("ring.bytes=big: %v", err)
	}
}
