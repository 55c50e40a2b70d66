package lqcat

import (
	"bufio"
	"bytes"
	"testing"
	"time"

	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
)

// FuzzJSONRoundTrip: any key, value and header survive -C -J followed by -P -J.
func FuzzJSONRoundTrip(f *testing.F) {
	f.Add([]byte("k"), []byte("v"), []byte("h"), []byte("x"))
	f.Add([]byte{0xff}, []byte{0, 0xc3}, []byte("\u2028"), []byte("<&>\"\\"))
	f.Fuzz(func(t *testing.T, key, value, hname, hvalue []byte) {
		r := client.Received{Partition: 3, Offset: 9, Timestamp: time.UnixMilli(42), Key: key, Value: value,
			Headers: []wire.RecordHeader{{Name: hname, Value: hvalue}}}
		line := appendJSON(nil, "t", &r)
		if bytes.IndexByte(line, '\n') >= 0 {
			t.Fatalf("raw newline in %s", line)
		}
		p, err := parseJSONLine(line)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		m := p.msg
		if !bytes.Equal(m.Key, key) || !bytes.Equal(m.Value, value) || len(m.Headers) != 1 ||
			!bytes.Equal(m.Headers[0].Name, hname) || !bytes.Equal(m.Headers[0].Value, hvalue) || m.Partition != 3 {
			t.Fatalf("%s decoded to %+v", line, m)
		}
	})
}

// FuzzSplitter: without over-long messages, joining the messages with the delimiter gives
// back the input (less one trailing delimiter); an over-long message is reported by its size.
func FuzzSplitter(f *testing.F) {
	f.Add([]byte("a\nb\n\nc"), []byte("\n"), 4)
	f.Add([]byte("x::y:::z"), []byte("::"), 2)
	f.Fuzz(func(t *testing.T, in, delim []byte, max int) {
		if len(delim) == 0 || len(delim) > 4 || max < 1 || max > 64 {
			return
		}
		s := splitter{br: bufio.NewReaderSize(bytes.NewReader(in), 16), delim: delim, max: max}
		var out []byte
		for first := true; ; first = false {
			m, skipped, err := s.next()
			if err != nil {
				break
			}
			if !first {
				out = append(out, delim...)
			}
			if skipped > 0 {
				if skipped <= max {
					t.Fatalf("skipped %d bytes, max %d", skipped, max)
				}
				out = append(out, bytes.Repeat([]byte{'?'}, skipped)...)
				continue
			}
			if len(m) > max {
				t.Fatalf("message of %d bytes, max %d", len(m), max)
			}
			out = append(out, m...)
		}
		if len(out) != len(bytes.TrimSuffix(in, delim)) && len(out) != len(in) {
			t.Fatalf("%q by %q: reassembled %d bytes of %d", in, delim, len(out), len(in))
		}
	})
}
