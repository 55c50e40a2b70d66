package auth

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/crypto/argon2"
)

// Params are argon2id parameters. They are encoded into every hash, so hashes made with old
// parameters keep verifying after the defaults change (see NeedsRehash).
type Params struct {
	MemoryKiB uint32 // memory in KiB
	Time      uint32 // passes over the memory
	Threads   uint8  // lanes
}

// Bounds that every hash must respect, both when made and when parsed. They keep a corrupt
// or hostile encoding from making Verify allocate gigabytes or run for minutes.
const (
	MinMemoryKiB = 8                 // argon2 needs at least 8 KiB per lane
	MaxMemoryKiB = 256 * 1024        // 256 MiB
	MaxTime      = 16                // passes
	MaxThreads   = 16                // lanes
	saltLen      = 16                // bytes of random salt made by Hash
	keyLen       = 32                // bytes of key made by Hash
	minSaltLen   = 8                 // shortest salt Verify accepts
	maxSaltLen   = 64                // longest salt Verify accepts
	minKeyLen    = 16                // shortest key Verify accepts
	maxKeyLen    = 64                // longest key Verify accepts
	phcPrefix    = "$argon2id$v=19$" // only argon2id version 0x13 is produced or accepted
)

// ErrMalformed is returned (wrapped) by Verify and CheckEncoding for an encoding that is not a
// well-formed argon2id PHC string within bounds.
var ErrMalformed = errors.New("auth: malformed password hash")

// ErrBadParams is returned (wrapped) by Hash for parameters outside the bounds.
var ErrBadParams = errors.New("auth: argon2id parameters out of bounds")

// ErrEmptyPassword is returned by Hash for an empty password.
var ErrEmptyPassword = errors.New("auth: empty password")

// DefaultParams are the OWASP-recommended argon2id parameters: 19 MiB, 2 passes, 1 lane
// (about 100 ms per hash on the reference machine).
func DefaultParams() Params { return Params{MemoryKiB: 19456, Time: 2, Threads: 1} }

// TestParams are cheap parameters (64 KiB, 1 pass, 1 lane) for tests. Never use them in
// production: they make offline guessing thousands of times cheaper.
func TestParams() Params { return Params{MemoryKiB: 64, Time: 1, Threads: 1} }

// Validate reports whether p is within the bounds this package accepts.
func (p Params) Validate() error {
	switch {
	case p.Threads < 1 || p.Threads > MaxThreads:
		return fmt.Errorf("threads %d outside [1, %d]", p.Threads, MaxThreads)
	case p.Time < 1 || p.Time > MaxTime:
		return fmt.Errorf("time %d outside [1, %d]", p.Time, MaxTime)
	case p.MemoryKiB < MinMemoryKiB*uint32(p.Threads) || p.MemoryKiB > MaxMemoryKiB:
		return fmt.Errorf("memory %d KiB outside [%d*threads, %d]", p.MemoryKiB, MinMemoryKiB, MaxMemoryKiB)
	}
	return nil
}

func (p Params) String() string {
	return fmt.Sprintf("m=%d,t=%d,p=%d", p.MemoryKiB, p.Time, p.Threads)
}

// Hash returns the argon2id hash of password as a PHC string
// ($argon2id$v=19$m=19456,t=2,p=1$<salt>$<key>, unpadded standard base64) with a 16-byte
// random salt and a 32-byte key. It blocks for one argon2 run; safe for concurrent use.
func Hash(password string, p Params) (string, error) {
	if password == "" {
		return "", ErrEmptyPassword
	}
	if err := p.Validate(); err != nil {
		return "", fmt.Errorf("%w: %v", ErrBadParams, err)
	}
	salt := make([]byte, saltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("auth: reading random salt: %w", err)
	}
	key := argon2.IDKey([]byte(password), salt, p.Time, p.MemoryKiB, p.Threads, keyLen)
	return encode(p, salt, key), nil
}

func encode(p Params, salt, key []byte) string {
	b64 := base64.RawStdEncoding
	return phcPrefix + p.String() + "$" + b64.EncodeToString(salt) + "$" + b64.EncodeToString(key)
}

// decoded is a parsed PHC string.
type decoded struct {
	params Params
	salt   []byte
	key    []byte
}

// decode parses and bounds-checks an argon2id PHC string. It allocates at most the length of
// encoded, whatever the input, and its errors never quote the input (a misplaced plaintext
// password must not reach a log).
func decode(encoded string) (decoded, error) {
	var d decoded
	if len(encoded) > 512 {
		return d, fmt.Errorf("%w: %d bytes", ErrMalformed, len(encoded))
	}
	rest, ok := strings.CutPrefix(encoded, phcPrefix)
	if !ok {
		return d, fmt.Errorf("%w: want prefix %q", ErrMalformed, phcPrefix)
	}
	fields := strings.Split(rest, "$")
	if len(fields) != 3 {
		return d, fmt.Errorf("%w: want params$salt$key after the version", ErrMalformed)
	}
	p, err := parseParams(fields[0])
	if err != nil {
		return d, err
	}
	if err := p.Validate(); err != nil {
		return d, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	b64 := base64.RawStdEncoding.Strict()
	salt, err := b64.DecodeString(fields[1])
	if err != nil || !isBase64(fields[1]) || len(salt) < minSaltLen || len(salt) > maxSaltLen {
		return d, fmt.Errorf("%w: salt must be %d-%d bytes of unpadded base64", ErrMalformed, minSaltLen, maxSaltLen)
	}
	key, err := b64.DecodeString(fields[2])
	if err != nil || !isBase64(fields[2]) || len(key) < minKeyLen || len(key) > maxKeyLen {
		return d, fmt.Errorf("%w: key must be %d-%d bytes of unpadded base64", ErrMalformed, minKeyLen, maxKeyLen)
	}
	return decoded{params: p, salt: salt, key: key}, nil
}

// isBase64 reports whether s holds only characters of the standard base64 alphabet. The
// decoder alone is not enough: it skips '\r' and '\n' even in strict mode, which would give
// one hash several spellings.
func isBase64(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/') {
			return false
		}
	}
	return true
}

// parseParams parses exactly "m=<u32>,t=<u32>,p=<u8>" in that order.
func parseParams(s string) (Params, error) {
	var p Params
	parts := strings.Split(s, ",")
	if len(parts) != 3 {
		return p, fmt.Errorf("%w: want m=<n>,t=<n>,p=<n>", ErrMalformed)
	}
	var vals [3]uint64
	for i, name := range [3]string{"m=", "t=", "p="} {
		digits, ok := strings.CutPrefix(parts[i], name)
		// Canonical decimal only: no sign, no leading zero, so each hash has one spelling.
		if !ok || digits == "" || len(digits) > 10 || digits[0] < '0' || digits[0] > '9' || digits[0] == '0' && len(digits) > 1 {
			return p, fmt.Errorf("%w: parameter %d: want %s<number>", ErrMalformed, i, name)
		}
		v, err := strconv.ParseUint(digits, 10, 32)
		if err != nil {
			return p, fmt.Errorf("%w: parameter %s<number>: not a 32-bit decimal", ErrMalformed, name)
		}
		vals[i] = v
	}
	if vals[2] > MaxThreads {
		return p, fmt.Errorf("%w: threads %d above %d", ErrMalformed, vals[2], MaxThreads)
	}
	return Params{MemoryKiB: uint32(vals[0]), Time: uint32(vals[1]), Threads: uint8(vals[2])}, nil
}

// CheckEncoding reports whether encoded is a well-formed argon2id PHC string within bounds,
// without running argon2. Safe for concurrent use.
func CheckEncoding(encoded string) error {
	_, err := decode(encoded)
	return err
}

// Verify reports whether password matches the PHC string encoded. The key comparison is
// constant-time. The error is non-nil (wrapping ErrMalformed) only when encoded is malformed
// or its parameters are out of bounds; a wrong password is (false, nil). It blocks for one
// argon2 run; safe for concurrent use.
func Verify(encoded, password string) (bool, error) {
	d, err := decode(encoded)
	if err != nil {
		return false, err
	}
	p := d.params
	key := argon2.IDKey([]byte(password), d.salt, p.Time, p.MemoryKiB, p.Threads, uint32(len(d.key)))
	return subtle.ConstantTimeCompare(key, d.key) == 1, nil
}

// NeedsRehash reports whether encoded was made with parameters other than p (or is
// malformed), so that a successful login may store a fresh Hash. Safe for concurrent use.
func NeedsRehash(encoded string, p Params) bool {
	d, err := decode(encoded)
	return err != nil || d.params != p || len(d.key) != keyLen || len(d.salt) != saltLen
}

// ConstantTimeEqual reports whether a == b in time that depends only on the lengths.
func ConstantTimeEqual(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// GeneratePassword returns a random password: 18 bytes (144 bits) from crypto/rand as 24
// characters of unpadded URL-safe base64. Safe for concurrent use.
func GeneratePassword() (string, error) {
	b := make([]byte, 18)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("auth: reading random bytes: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}
