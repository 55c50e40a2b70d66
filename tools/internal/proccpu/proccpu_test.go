package proccpu

import (
	"errors"
	"fmt"
	"os"
	"testing"
)

func TestParseStat(t *testing.T) {
	// A real line (kernel 6.x), utime 1234 and stime 567 ticks.
	real := "4711 (lightq) S 1 4711 4711 0 -1 4194560 2480 0 0 0 1234 567 0 0 20 0 9 0 3081 1461710848 3417 18446744073709551615 1 1 0 0 0 0 0 0 2143420159 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n"
	cases := []struct {
		name string
		in   string
		want float64
		err  bool
	}{
		{"real line", real, 18.01, false},
		{"comm with spaces and parens", "12 (a) b (c) R 1 1 1 0 -1 0 0 0 0 0 250 50 0 0", 3, false},
		{"zero times", "1 (init) S 0 1 1 0 -1 0 0 0 0 0 0 0", 0, false},
		{"empty", "", 0, true},
		{"no comm", "4711 lightq S 1 4711", 0, true},
		{"no pid", "(x) S 1 1 1 0 -1 0 0 0 0 0 1 1", 0, true},
		{"pid not a number", "x1 (x) S 1 1 1 0 -1 0 0 0 0 0 1 1", 0, true},
		{"close before open", ")x( S 1 1 1 0 -1 0 0 0 0 0 1 1", 0, true},
		{"too few fields", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 1", 0, true},
		{"negative utime", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 -5 1", 0, true},
		{"utime not a number", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 1e3 1", 0, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseStat([]byte(c.in))
			if c.err {
				if !errors.Is(err, ErrStat) {
					t.Fatalf("ParseStat = %v, %v; want ErrStat", got, err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("ParseStat = %v, %v; want %v", got, err, c.want)
			}
		})
	}
}

// TestSecondsOfSelf: this process's stat file parses, and burning CPU shows in it and in
// Self (both count all threads; the stat file in 10 ms ticks).
func TestSecondsOfSelf(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	before, err := Seconds(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	self0 := Self()
	x := 0
	for n := 0; n < 20_000 && Self()-self0 < 0.05; n++ { // until 50 ms of CPU are used
		for i := 0; i < 1e5; i++ {
			x += i
		}
	}
	after, err := Seconds(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after < before || after-before > 10 {
		t.Errorf("stat CPU went from %v to %v s (x=%d)", before, after, x)
	}
	if _, err := Seconds(-1); err == nil {
		t.Error("Seconds(-1): no error")
	}
}

// FuzzParseStat: any input parses or fails with ErrStat, never panics; a line built from a
// pid, any comm and two tick counts parses back to those ticks.
func FuzzParseStat(f *testing.F) {
	f.Add([]byte("12 (a) b (c) R 1 1 1 0 -1 0 0 0 0 0 250 50 0 0"), "a) (b", uint32(7), uint32(9))
	f.Add([]byte(""), "", uint32(0), uint32(0))
	f.Fuzz(func(t *testing.T, raw []byte, comm string, u, s uint32) {
		if v, err := ParseStat(raw); err != nil && !errors.Is(err, ErrStat) || err == nil && v < 0 {
			t.Fatalf("ParseStat(%q) = %v, %v", raw, v, err)
		}
		line := fmt.Sprintf("42 (%s) S 1 1 1 0 -1 0 0 0 0 0 %d %d 0 0 20 0 1", comm, u, s)
		v, err := ParseStat([]byte(line))
		if err != nil || v != float64(uint64(u)+uint64(s))/ClockTick {
			t.Fatalf("ParseStat(%q) = %v, %v; want %v", line, v, err, float64(uint64(u)+uint64(s))/ClockTick)
		}
	})
}
