package broker

import (
	"testing"
	"time"
)

// The group-sessions record: what encodes decodes to the value rounded up to a millisecond;
// anything else is refused.
func TestGroupSessionsRecord(t *testing.T) {
	good := encodeGroupSessions(1500 * time.Millisecond)
	flip := func(i int) []byte {
		b := append([]byte(nil), good...)
		b[i] ^= 1
		return b
	}
	for _, tc := range []struct {
		name string
		b    []byte
		want time.Duration
		ok   bool
	}{
		{"zero", encodeGroupSessions(0), 0, true},
		{"1.5s", good, 1500 * time.Millisecond, true},
		{"rounded up", encodeGroupSessions(time.Millisecond + time.Nanosecond), 2 * time.Millisecond, true},
		{"largest", encodeGroupSessions(maxRecordedSession), maxRecordedSession, true},
		{"empty", nil, 0, false},
		{"short", good[:15], 0, false},
		{"long", append(append([]byte(nil), good...), 0), 0, false},
		{"magic", flip(0), 0, false},
		{"crc", flip(5), 0, false},
		{"value", flip(15), 0, false},
		{"above the bound", encodeGroupSessions(maxRecordedSession + time.Millisecond), 0, false},
	} {
		got, ok := decodeGroupSessions(tc.b)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: %v %v, want %v %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func FuzzGroupSessionsRecord(f *testing.F) {
	f.Add(encodeGroupSessions(10 * time.Second))
	f.Add([]byte("LQGS"))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, ok := decodeGroupSessions(b)
		if !ok {
			return
		}
		if d < 0 || d > maxRecordedSession {
			t.Fatalf("decoded %v", d)
		}
		if again, ok := decodeGroupSessions(encodeGroupSessions(d)); !ok || again != d {
			t.Fatalf("%v encodes to what decodes as %v %v", d, again, ok)
		}
	})
}
