package auth

import (
	"errors"
	"regexp"
	"strings"
	"testing"
)

func mustHash(t testing.TB, password string, p Params) string {
	t.Helper()
	h, err := Hash(password, p)
	if err != nil {
		t.Fatalf("Hash: %v", err)
	}
	return h
}

func TestHashVerifyRoundTrip(t *testing.T) {
	for _, p := range []Params{TestParams(), {MemoryKiB: 32, Time: 2, Threads: 4}, DefaultParams()} {
		t.Run(p.String(), func(t *testing.T) {
			h := mustHash(t, "correct horse battery staple", p)
			if want := "$argon2id$v=19$" + p.String() + "$"; !strings.HasPrefix(h, want) {
				t.Fatalf("hash %q lacks prefix %q", h, want)
			}
			if ok, err := Verify(h, "correct horse battery staple"); !ok || err != nil {
				t.Fatalf("Verify(right) = %v, %v", ok, err)
			}
			for _, wrong := range []string{"", "correct horse battery stapl", "Correct horse battery staple", "correct horse battery staple "} {
				if ok, err := Verify(h, wrong); ok || err != nil {
					t.Fatalf("Verify(%q) = %v, %v; want false, nil", wrong, ok, err)
				}
			}
			if NeedsRehash(h, p) {
				t.Fatal("NeedsRehash with the same params")
			}
		})
	}
}

func TestHashFormat(t *testing.T) {
	h := mustHash(t, "pw", DefaultParams())
	re := regexp.MustCompile(`^\$argon2id\$v=19\$m=19456,t=2,p=1\$[A-Za-z0-9+/]{22}\$[A-Za-z0-9+/]{43}$`)
	if !re.MatchString(h) {
		t.Fatalf("hash %q does not match %v", h, re)
	}
	if !NeedsRehash(h, TestParams()) {
		t.Fatal("NeedsRehash false for other params")
	}
}

func TestSaltsDiffer(t *testing.T) {
	seen := map[string]bool{}
	for range 20 {
		h := mustHash(t, "same password", TestParams())
		salt := strings.Split(h, "$")[4]
		if seen[salt] {
			t.Fatalf("salt %q repeated", salt)
		}
		seen[salt] = true
	}
}

func TestHashRejects(t *testing.T) {
	if _, err := Hash("", TestParams()); !errors.Is(err, ErrEmptyPassword) {
		t.Fatalf("empty password: %v", err)
	}
	for _, p := range []Params{
		{MemoryKiB: 1 << 22, Time: 1, Threads: 1}, // 4 GiB
		{MemoryKiB: MaxMemoryKiB + 1, Time: 1, Threads: 1},
		{MemoryKiB: 64, Time: 0, Threads: 1},
		{MemoryKiB: 64, Time: MaxTime + 1, Threads: 1},
		{MemoryKiB: 64, Time: 1, Threads: 0},
		{MemoryKiB: 64, Time: 1, Threads: MaxThreads + 1},
		{MemoryKiB: 15, Time: 1, Threads: 2}, // below 8 KiB per lane
	} {
		if _, err := Hash("pw", p); !errors.Is(err, ErrBadParams) {
			t.Errorf("Hash with %v: err %v, want ErrBadParams", p, err)
		}
	}
}

func TestVerifyMalformed(t *testing.T) {
	good := mustHash(t, "pw", TestParams())
	f := strings.Split(good, "$") // "", argon2id, v=19, params, salt, key
	join := func(parts ...string) string { return strings.Join(parts, "$") }
	cases := map[string]string{
		"empty":             "",
		"garbage":           "not a hash",
		"bcrypt":            "$2a$10$N9qo8uLOickgx2ZMRZoMyeIjZAgcfl7p92ldGxad68LJZdL17lhWy",
		"argon2i":           join("", "argon2i", f[2], f[3], f[4], f[5]),
		"argon2d":           join("", "argon2d", f[2], f[3], f[4], f[5]),
		"version 16":        join("", f[1], "v=16", f[3], f[4], f[5]),
		"no version":        join("", f[1], f[3], f[4], f[5]),
		"missing key":       join("", f[1], f[2], f[3], f[4]),
		"extra field":       join("", f[1], f[2], f[3], f[4], f[5], "x"),
		"trailing dollar":   good + "$",
		"params reordered":  join("", f[1], f[2], "t=1,m=64,p=1", f[4], f[5]),
		"params missing p":  join("", f[1], f[2], "m=64,t=1", f[4], f[5]),
		"params extra":      join("", f[1], f[2], "m=64,t=1,p=1,x=2", f[4], f[5]),
		"params negative":   join("", f[1], f[2], "m=-64,t=1,p=1", f[4], f[5]),
		"params plus":       join("", f[1], f[2], "m=+64,t=1,p=1", f[4], f[5]),
		"params hex":        join("", f[1], f[2], "m=0x40,t=1,p=1", f[4], f[5]),
		"params leading 0":  join("", f[1], f[2], "m=064,t=1,p=1", f[4], f[5]),
		"params empty":      join("", f[1], f[2], "m=,t=1,p=1", f[4], f[5]),
		"params spaces":     join("", f[1], f[2], "m= 64,t=1,p=1", f[4], f[5]),
		"m 4GiB":            join("", f[1], f[2], "m=4194304,t=1,p=1", f[4], f[5]),
		"m overflow":        join("", f[1], f[2], "m=4294967296,t=1,p=1", f[4], f[5]),
		"m huge":            join("", f[1], f[2], "m=99999999999999999999,t=1,p=1", f[4], f[5]),
		"m zero":            join("", f[1], f[2], "m=0,t=1,p=1", f[4], f[5]),
		"t zero":            join("", f[1], f[2], "m=64,t=0,p=1", f[4], f[5]),
		"t huge":            join("", f[1], f[2], "m=64,t=4000000000,p=1", f[4], f[5]),
		"p zero":            join("", f[1], f[2], "m=64,t=1,p=0", f[4], f[5]),
		"p 255":             join("", f[1], f[2], "m=4096,t=1,p=255", f[4], f[5]),
		"p 256":             join("", f[1], f[2], "m=4096,t=1,p=256", f[4], f[5]),
		"salt empty":        join("", f[1], f[2], f[3], "", f[5]),
		"salt short":        join("", f[1], f[2], f[3], "AAAA", f[5]),
		"salt not base64":   join("", f[1], f[2], f[3], "!!!!!!!!!!!!!!!!!!!!!!", f[5]),
		"salt padded":       join("", f[1], f[2], f[3], f[4]+"==", f[5]),
		"salt url alphabet": join("", f[1], f[2], f[3], strings.Repeat("_", 22), f[5]),
		"salt with CR":      join("", f[1], f[2], f[3], "\r"+f[4], f[5]),
		"key with LF":       join("", f[1], f[2], f[3], f[4], f[5][:20]+"\n"+f[5][20:]),
		"salt too long":     join("", f[1], f[2], f[3], strings.Repeat("A", 100), f[5]),
		"key empty":         join("", f[1], f[2], f[3], f[4], ""),
		"key short":         join("", f[1], f[2], f[3], f[4], "AAAAAAAA"),
		"key not base64":    join("", f[1], f[2], f[3], f[4], strings.Repeat("*", 43)),
		"key non-canonical": join("", f[1], f[2], f[3], f[4], f[5][:42]+"B"), // nonzero trailing bits
		"too long":          good + strings.Repeat("A", 600),
	}
	for name, enc := range cases {
		t.Run(name, func(t *testing.T) {
			ok, err := Verify(enc, "pw")
			if ok || !errors.Is(err, ErrMalformed) {
				t.Fatalf("Verify(%q) = %v, %v; want false, ErrMalformed", enc, ok, err)
			}
			if err := CheckEncoding(enc); !errors.Is(err, ErrMalformed) {
				t.Fatalf("CheckEncoding(%q) = %v", enc, err)
			}
			if !NeedsRehash(enc, TestParams()) {
				t.Fatal("NeedsRehash false for a malformed hash")
			}
		})
	}
	if err := CheckEncoding(good); err != nil {
		t.Fatalf("CheckEncoding(good) = %v", err)
	}
}

func TestConstantTimeEqual(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{{"", "", true}, {"a", "a", true}, {"a", "b", false}, {"a", "ab", false}, {"abc", "abd", false}} {
		if got := ConstantTimeEqual(c.a, c.b); got != c.want {
			t.Errorf("ConstantTimeEqual(%q, %q) = %v", c.a, c.b, got)
		}
	}
}

func TestGeneratePassword(t *testing.T) {
	re := regexp.MustCompile(`^[A-Za-z0-9_-]{24}$`)
	seen := map[string]bool{}
	for range 100 {
		pw, err := GeneratePassword()
		if err != nil {
			t.Fatal(err)
		}
		if !re.MatchString(pw) || seen[pw] {
			t.Fatalf("password %q malformed or repeated", pw)
		}
		seen[pw] = true
	}
}

// FuzzVerify feeds arbitrary encodings to Verify. Invariants: no panic; an encoding is either
// rejected with ErrMalformed or has parameters within bounds; an accepted encoding re-encodes
// to itself (the parser is strict, so there is one spelling per hash).
func FuzzVerify(f *testing.F) {
	good := mustHash(f, "pw", TestParams())
	f.Add(good, "pw")
	f.Add(good, "wrong")
	f.Add("$argon2id$v=19$m=4194304,t=1,p=1$AAAAAAAAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "pw")
	f.Add("$argon2id$v=19$m=64,t=1,p=1$$", "")
	f.Add("$argon2id$v=19$m=,t=,p=$AAAA$AAAA", "x")
	f.Fuzz(func(t *testing.T, enc, pw string) {
		d, err := decode(enc)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("decode error %v does not wrap ErrMalformed", err)
			}
			if ok, verr := Verify(enc, pw); ok || verr == nil {
				t.Fatalf("Verify accepted what decode rejected: %v %v", ok, verr)
			}
			return
		}
		if err := d.params.Validate(); err != nil {
			t.Fatalf("decode accepted out-of-bounds params %v: %v", d.params, err)
		}
		if re := encode(d.params, d.salt, d.key); re != enc {
			t.Fatalf("re-encoding %q gave %q", enc, re)
		}
		// Keep fuzzing fast: only run argon2 for cheap parameters (bounds are checked above).
		if uint64(d.params.MemoryKiB)*uint64(d.params.Time) <= 1<<12 {
			if _, err := Verify(enc, pw); err != nil {
				t.Fatalf("Verify error on a decodable hash: %v", err)
			}
		}
	})
}
