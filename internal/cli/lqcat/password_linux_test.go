package lqcat

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal: what is written to master arrives on slave as typed input,
// and what the terminal shows (echo) can be read from master.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("opening a pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlocking the pseudo-terminal: %v", err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("pseudo-terminal number: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("opening the pseudo-terminal's slave: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return m, s
}

// lockedBuffer is a bytes.Buffer safe for a writer and a reader on two goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestNewPasswordFromTerminal: on a terminal, user create and passwd ask twice with the echo
// off, so the terminal shows nothing of what is typed, refuse two different answers, and
// never print the password.
func TestNewPasswordFromTerminal(t *testing.T) {
	e := newEnv(t, nil)
	const pw = "typed-at-the-prompt"
	// run runs lqcat on a terminal and types each answer once the echo is off for it: after
	// the prompt before it is shown.
	run := func(answers [2]string, args ...string) (result, string) {
		t.Helper()
		master, slave := openPTY(t)
		echoOff := func() bool {
			tio, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
			return err == nil && tio.Lflag&unix.ECHO == 0
		}
		var out bytes.Buffer
		var errb lockedBuffer
		done := make(chan int, 1)
		go func() {
			done <- Main(t.Context(), args, func(k string) string { return e.vars[k] }, slave, &out, &errb)
		}()
		for i, prompt := range []string{"New password for user", "Again: "} {
			waitFor(t, "asking "+prompt, func() bool { return strings.Contains(errb.String(), prompt) && echoOff() })
			if _, err := master.Write([]byte(answers[i] + "\n")); err != nil {
				t.Fatal(err)
			}
		}
		code := <-done
		slave.Close()
		shown := make([]byte, 4096)
		n, _ := master.Read(shown) // what the terminal showed: the echo of the answers, if any
		return result{out.String(), errb.String(), code}, string(shown[:n])
	}
	r, shown := run([2]string{pw, pw}, "user", "create", "typist")
	if r.code != 0 || r.out != "created user \"typist\"\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.out, r.err)
	}
	if strings.Contains(shown+r.out+r.err, pw) {
		t.Fatalf("the password was shown: terminal %q, stdout %q, stderr %q", shown, r.out, r.err)
	}
	e.ok("", "-L", "--user", "typist", "--password", pw)

	r, _ = run([2]string{"one-password", "another-one"}, "user", "passwd", "typist")
	if r.code != ExitUsage || !strings.Contains(r.err, "differ") {
		t.Fatalf("two different answers: exit %d, %q", r.code, r.err)
	}
	e.ok("", "-L", "--user", "typist", "--password", pw)
}
