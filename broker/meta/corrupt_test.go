package meta

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// resum rewrites the checksum to match a modified state, to test validation behind it.
func resum(t *testing.T, data []byte, edit func(string) string) []byte {
	t.Helper()
	var env envelope
	if err := json.Unmarshal(data, &env); err != nil {
		t.Fatal(err)
	}
	var compact bytes.Buffer
	json.Compact(&compact, env.State)
	body := []byte(edit(compact.String()))
	if string(body) == compact.String() {
		t.Fatal("edit changed nothing")
	}
	env.State, env.Checksum = body, checksum(body)
	out, _ := json.Marshal(env)
	return out
}

func TestOpenCorrupt(t *testing.T) {
	cases := []struct {
		name    string
		corrupt func(t *testing.T, data []byte) []byte
		wantErr error
	}{
		{"empty file", func(t *testing.T, d []byte) []byte { return nil }, ErrCorrupt},
		{"truncated half", func(t *testing.T, d []byte) []byte { return d[:len(d)/2] }, ErrCorrupt},
		{"truncated last byte", func(t *testing.T, d []byte) []byte { return d[:len(d)-2] }, ErrCorrupt},
		{"zeroed", func(t *testing.T, d []byte) []byte { return make([]byte, len(d)) }, ErrCorrupt},
		{"bit flip in a hash", func(t *testing.T, d []byte) []byte {
			i := bytes.Index(d, []byte("$argon2id$")) + 20
			d[i] ^= 0x02
			return d
		}, ErrCorrupt},
		{"bit flip in partitions", func(t *testing.T, d []byte) []byte {
			return bytes.Replace(d, []byte(`"partitions": 3`), []byte(`"partitions": 7`), 1)
		}, ErrCorrupt},
		{"bit flip in checksum", func(t *testing.T, d []byte) []byte {
			i := bytes.Index(d, []byte("sha256:")) + 10
			d[i] ^= 0x01
			return d
		}, ErrCorrupt},
		{"version 3", func(t *testing.T, d []byte) []byte {
			return bytes.Replace(d, []byte(`"format_version": 2`), []byte(`"format_version": 3`), 1)
		}, ErrCorrupt},
		{"version 2 content labelled 1", func(t *testing.T, d []byte) []byte {
			return bytes.Replace(d, []byte(`"format_version": 2`), []byte(`"format_version": 1`), 1)
		}, ErrCorrupt},
		{"no version", func(t *testing.T, d []byte) []byte {
			return bytes.Replace(d, []byte(`"format_version": 2,`), nil, 1)
		}, ErrCorrupt},
		{"no state", func(t *testing.T, d []byte) []byte { return []byte(`{"format_version":2,"checksum":""}`) }, ErrCorrupt},
		{"trailing garbage", func(t *testing.T, d []byte) []byte { return append(d, "}x"...) }, ErrCorrupt},
		{"not json", func(t *testing.T, d []byte) []byte { return []byte("users: [alice]\n") }, ErrCorrupt},
		{"unknown kind, checksum fixed", func(t *testing.T, d []byte) []byte {
			return resum(t, d, func(s string) string { return strings.Replace(s, `"durable"`, `"lukewarm"`, 1) })
		}, ErrCorrupt},
		{"unknown field, checksum fixed", func(t *testing.T, d []byte) []byte {
			return resum(t, d, func(s string) string { return strings.Replace(s, `"users":`, `"x":1,"users":`, 1) })
		}, ErrCorrupt},
		{"duplicate topic, checksum fixed", func(t *testing.T, d []byte) []byte {
			return resum(t, d, func(s string) string {
				i := strings.Index(s, `"topics":[`) + len(`"topics":[`)
				j := strings.Index(s[i:], `},{`) + i + 1
				return s[:i] + s[i:j] + "," + s[i:]
			})
		}, ErrCorrupt},
		{"missing topic user, checksum fixed", func(t *testing.T, d []byte) []byte {
			return resum(t, d, func(s string) string { return strings.Replace(s, `"user":"bob"`, `"user":"carol"`, 1) })
		}, ErrInvalid},
		{"unknown role, checksum fixed", func(t *testing.T, d []byte) []byte {
			return resum(t, d, func(s string) string { return strings.Replace(s, `"consume"`, `"delete"`, 1) })
		}, ErrCorrupt},
		{"role twice, checksum fixed", func(t *testing.T, d []byte) []byte {
			return resum(t, d, func(s string) string { return strings.Replace(s, `["consume"]`, `["consume","consume"]`, 1) })
		}, ErrCorrupt},
		{"grant listed twice, checksum fixed", func(t *testing.T, d []byte) []byte {
			return resum(t, d, func(s string) string {
				g := `{"topic":"ticks","roles":["consume"]}`
				return strings.Replace(s, g, g+","+g, 1)
			})
		}, ErrCorrupt},
		{"grant without roles, checksum fixed", func(t *testing.T, d []byte) []byte {
			return resum(t, d, func(s string) string { return strings.Replace(s, `["consume"]`, `[]`, 1) })
		}, ErrInvalid},
		{"grant on a missing topic, checksum fixed", func(t *testing.T, d []byte) []byte {
			return resum(t, d, func(s string) string { return strings.Replace(s, `{"topic":"ticks"`, `{"topic":"gone"`, 1) })
		}, ErrInvalid},
		{"plaintext hash, checksum fixed", func(t *testing.T, d []byte) []byte {
			return resum(t, d, func(s string) string {
				return strings.Replace(s, `"hash":"`+testHash, `"hash":"hunter2`, 1)
			})
		}, ErrInvalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			seeded(t, dir)
			path := filepath.Join(dir, FileName)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			bad := c.corrupt(t, bytes.Clone(data))
			if bytes.Equal(bad, data) {
				t.Fatal("corrupt function changed nothing")
			}
			if err := os.WriteFile(path, bad, 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := Open(dir)
			if err == nil {
				t.Fatalf("Open succeeded with state %+v", s.State())
			}
			if !errors.Is(err, c.wantErr) || !strings.Contains(err.Error(), path) {
				t.Fatalf("Open error %q: want %v naming %s", err, c.wantErr, path)
			}
		})
	}
}

// Flipping any single bit of the file either makes Open fail or leaves the state unchanged
// (a change to insignificant whitespace); it never yields a different state.
func TestOpenEveryBitFlip(t *testing.T) {
	dir := t.TempDir()
	want := seeded(t, dir).State()
	path := filepath.Join(dir, FileName)
	data, _ := os.ReadFile(path)
	for i := range data {
		for _, bit := range []byte{0x01, 0x10, 0x80} {
			bad := bytes.Clone(data)
			bad[i] ^= bit
			st, _, err := unmarshal(bad)
			if err == nil {
				err = st.Validate()
			}
			if err == nil && !reflect.DeepEqual(st, want) {
				t.Fatalf("flipping bit %#x of byte %d (%q) gave a different valid state", bit, i, data[i])
			}
		}
	}
}
