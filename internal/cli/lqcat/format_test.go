package lqcat

import (
	"bufio"
	"bytes"
	"flag"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (go test -update rewrites it):\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func sampleRecords() []client.Received {
	ts := time.UnixMilli(1700000000123)
	return []client.Received{
		{Partition: 0, Offset: 0, Timestamp: ts, Value: []byte("hello")},
		{Partition: 2, Offset: 41, Timestamp: ts.Add(time.Second), Key: []byte("user-7"), Value: []byte("logged in"),
			Headers: []wire.RecordHeader{{Name: []byte("trace"), Value: []byte("abc")}, {Name: []byte("v"), Value: []byte("2")}}},
		{Partition: 1, Offset: 7, Timestamp: ts, Key: []byte{0xff, 0x00}, Value: []byte{0x00, 0x01, 0xfe, 0xff},
			Headers: []wire.RecordHeader{{Name: []byte{0xc3}, Value: []byte{0x80}}}},
		{Partition: 0, Offset: 1, Timestamp: ts, Value: []byte("<tab>\t\"quoted\" & ünïcode \u2028")},
	}
}

func TestFormatsGolden(t *testing.T) {
	formats := []string{
		`%s\n`,
		`%t/%p/%o %k=%s\n`,
		`%T %S %K [%h]\n`,
		`%%s is %s\t%%\x21\r\n`,
	}
	var b strings.Builder
	for _, f := range formats {
		fm, err := parseFormat(f)
		if err != nil {
			t.Fatalf("parseFormat(%q): %v", f, err)
		}
		b.WriteString("== -f " + f + "\n")
		for _, r := range sampleRecords() {
			b.Write(fm.render(nil, "events", &r))
		}
	}
	b.WriteString("== plain, -K :\n")
	plain := plainFormat([]byte("\n"), []byte(":"))
	for _, r := range sampleRecords() {
		b.Write(plain.render(nil, "events", &r))
	}
	b.WriteString("== -J\n")
	for _, r := range sampleRecords() {
		b.Write(appendJSON(nil, "events", &r))
		b.WriteByte('\n')
	}
	golden(t, "formats.golden", b.String())
}

func TestParseFormatErrors(t *testing.T) {
	for _, f := range []string{`%x`, `abc%`, `\q`, `\x4`, `\`} {
		if _, err := parseFormat(f); err == nil {
			t.Errorf("parseFormat(%q) accepted", f)
		}
	}
}

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{`\n`: "\n", `a\tb`: "a\tb", `\x00\xff`: "\x00\xff", `\\`: `\`, `::`: "::", `\r\n`: "\r\n", `\0`: "\x00"} {
		got, err := unescape(in)
		if err != nil || string(got) != want {
			t.Errorf("unescape(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// randBytes returns up to max random bytes; a third of the time, valid UTF-8 text with
// the characters JSON escapes.
func randBytes(rng *rand.Rand, max int) []byte {
	n := rng.IntN(max + 1)
	if rng.IntN(3) == 0 {
		runes := []rune("aé€😀\x00\"\\\n\u2028<&")
		var b []byte
		for range n {
			b = utf8.AppendRune(b, runes[rng.IntN(len(runes))])
		}
		return b
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// TestJSONRoundTrip checks that every message survives -C -J then -P -J, binary included.
func TestJSONRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		r := client.Received{Partition: int32(rng.IntN(8)), Offset: int64(i), Timestamp: time.UnixMilli(rng.Int64N(1 << 42)),
			Key: randBytes(rng, 20), Value: randBytes(rng, 200)}
		for range rng.IntN(3) {
			r.Headers = append(r.Headers, wire.RecordHeader{Name: randBytes(rng, 8), Value: randBytes(rng, 30)})
		}
		line := appendJSON(nil, "t", &r)
		if bytes.IndexByte(line, '\n') >= 0 {
			t.Fatalf("JSON has a raw newline: %s", line)
		}
		p, err := parseJSONLine(line)
		if err != nil {
			t.Fatalf("parseJSONLine(%s): %v", line, err)
		}
		m := p.msg
		if !bytes.Equal(m.Key, r.Key) || !bytes.Equal(m.Value, r.Value) || m.Partition != r.Partition || !m.HasPartition ||
			m.Timestamp.UnixMilli() != r.Timestamp.UnixMilli() || len(m.Headers) != len(r.Headers) {
			t.Fatalf("round trip of %s:\n got %+v\nwant %+v", line, m, r)
		}
		for j := range r.Headers {
			if !bytes.Equal(m.Headers[j].Name, r.Headers[j].Name) || !bytes.Equal(m.Headers[j].Value, r.Headers[j].Value) {
				t.Fatalf("header %d of %s differs", j, line)
			}
		}
	}
}

func TestParseJSONLineErrors(t *testing.T) {
	for _, in := range []string{`{`, `{"value":"!!","value_encoding":"base64"}`, `{"value":"a","value_encoding":"hex"}`, `{"partition":-2}`} {
		if _, err := parseJSONLine([]byte(in)); err == nil {
			t.Errorf("parseJSONLine(%s) accepted", in)
		}
	}
}

func TestSplitter(t *testing.T) {
	type res struct {
		msg     string
		skipped int
	}
	cases := []struct {
		in, delim string
		max       int
		want      []res
	}{
		{"a\nbb\n\nccc", "\n", 10, []res{{"a", 0}, {"bb", 0}, {"", 0}, {"ccc", 0}}},
		{"a\n", "\n", 10, []res{{"a", 0}}},
		{"", "\n", 10, nil},
		{"x::y:z::", "::", 10, []res{{"x", 0}, {"y:z", 0}}},
		{"short\n" + strings.Repeat("L", 100) + "\nok", "\n", 10, []res{{"short", 0}, {"", 100}, {"ok", 0}}},
		{strings.Repeat("L", 50) + "--" + "end", "--", 8, []res{{"", 50}, {"end", 0}}},
		{strings.Repeat("L", 30), "\n", 8, []res{{"", 30}}},
	}
	for _, c := range cases {
		// A small bufio buffer makes messages and delimiters straddle reads.
		s := splitter{br: bufio.NewReaderSize(strings.NewReader(c.in), 16), delim: []byte(c.delim), max: c.max}
		var got []res
		for {
			m, skipped, err := s.next()
			if err != nil {
				break
			}
			got = append(got, res{string(m), skipped})
		}
		if len(got) != len(c.want) {
			t.Errorf("%q split by %q: got %v, want %v", c.in, c.delim, got, c.want)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("%q split by %q: got %v, want %v", c.in, c.delim, got, c.want)
				break
			}
		}
	}
}

func TestParseOffset(t *testing.T) {
	for in, want := range map[string]offsetSpec{
		"beginning": {kind: startBeginning},
		"end":       {kind: startEnd},
		"17":        {kind: startAbsolute, n: 17},
		"-5":        {kind: startRelative, n: 5},
		"s@1000":    {kind: startTime, n: 1000},
		"e@2000":    {stopAt: 2000, hasStop: true},
	} {
		got, err := parseOffset([]string{in})
		got.text = ""
		if err != nil || got != want {
			t.Errorf("parseOffset(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range [][]string{{"x"}, {"s@"}, {"1", "2"}, {"e@1", "e@2"}, {"s@-1"}} {
		if _, err := parseOffset(bad); err == nil {
			t.Errorf("parseOffset(%q) accepted", bad)
		}
	}
}

func TestUnglue(t *testing.T) {
	fs := newFlagSet("x")
	var c common
	c.register(fs)
	fs.Int("c", 0, "")
	fs.String("o", "", "")
	fs.Bool("e", false, "")
	got := strings.Join(unglue(fs, []string{"-c1", "-obeginning", "-e", "-o-5", "-user", "u", "--", "-c2"}), " ")
	if want := "-c 1 -o beginning -e -o -5 -user u -- -c2"; got != want {
		t.Errorf("unglue = %q, want %q", got, want)
	}
}

func TestParseSizeAndDuration(t *testing.T) {
	for in, want := range map[string]int64{"1024": 1024, "64KiB": 64 << 10, "10GB": 10e9, "3MiB": 3 << 20, "5B": 5} {
		if got, ok := parseSize(in); !ok || got != want {
			t.Errorf("parseSize(%q) = %d, %v", in, got, ok)
		}
	}
	for _, bad := range []string{"7d", "24h", "x", "-1"} {
		if _, ok := parseSize(bad); ok {
			t.Errorf("parseSize(%q) accepted", bad)
		}
	}
	for in, want := range map[string]int64{"7d": 7 * 86400000, "90m": 5400000, "1500ms": 1500} {
		if got, err := parseDurationMs(in); err != nil || got != want {
			t.Errorf("parseDurationMs(%q) = %d, %v", in, got, err)
		}
	}
}

// TestCommonFlagsFirst: common flags before a subcommand move after it; kcat mode and
// anything ambiguous stay as they are.
func TestCommonFlagsFirst(t *testing.T) {
	cases := []struct{ in, want string }{
		{"-b h:1 topic create t --kind durable", "topic create t --kind durable -b h:1"},
		{"-b=h:1 -q --admin-password pw topic list -J", "topic list -J -b=h:1 -q --admin-password pw"},
		{"-J -v stats", "stats -J -v"},
		{"--timeout 3s group describe -G g -t x", "group describe -G g -t x --timeout 3s"},
		{"topic list -b h:1", "topic list -b h:1"},
		{"-b h:1 -C -t topic", "-b h:1 -C -t topic"}, // kcat mode; "topic" is -t's value
		{"-C -t group -b h:1", "-C -t group -b h:1"},
		{"-b topic -L", "-b topic -L"}, // a broker named "topic"
		{"-b h:1", "-b h:1"},
		{"", ""},
	}
	for _, c := range cases {
		got := strings.Join(commonFlagsFirst(strings.Fields(c.in)), " ")
		if got != c.want {
			t.Errorf("%q -> %q, want %q", c.in, got, c.want)
		}
	}
}

// TestTopicSizeOptions: sizes with units become the plain integers the broker's options take,
// through the flags and through -X.
func TestTopicSizeOptions(t *testing.T) {
	f := topicFlags{segmentBytes: "64MiB", retention: listFlag{"10GB"}, extra: listFlag{"segment.bytes=2MiB", "retention.ms=1000"}}
	opts, err := f.options(wire.KindDurable)
	if err != nil {
		t.Fatal(err)
	}
	want := []wire.Option{{Key: "retention.bytes", Value: "10000000000"}, {Key: "segment.bytes", Value: "67108864"}, {Key: "segment.bytes", Value: "2097152"}, {Key: "retention.ms", Value: "1000"}}
	if !slices.Equal(opts, want) {
		t.Errorf("options = %v, want %v", opts, want)
	}
	f = topicFlags{extra: listFlag{"ring.bytes=lots"}}
	if _, err := f.options(wire.KindTransient); err == nil || !strings.Contains(err.Error(), "ring.bytes") {
		t.Errorf("-X ring.bytes=lots: %v", err)
	}
}
