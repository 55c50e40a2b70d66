package lqcat

import (
	"bytes"
	"fmt"
	"io"
	"os"

	"golang.org/x/term"

	"github.com/lightq/lightq/wire"
)

// newPassword is the password that user create and user passwd store for user: given (from
// --password) when not empty; else asked twice on the terminal, without echo, when stdin is
// one; else the first line of stdin (without its line end), so that a password never has to
// be an argument, which ps shows. It is added to the secrets scrubbed from messages.
func (r *runner) newPassword(user, given string) (string, error) {
	pw, err := r.readNewPassword(user, given)
	if err != nil {
		return "", err
	}
	switch {
	case pw == "":
		return "", usageErr("no password for user %q: give it on stdin, at the prompt or with --password", user)
	case len(pw) > wire.MaxPassword:
		return "", usageErr("the password of user %q is %d bytes, limit %d", user, len(pw), wire.MaxPassword)
	}
	r.secrets = append(r.secrets, pw)
	return pw, nil
}

func (r *runner) readNewPassword(user, given string) (string, error) {
	if given != "" {
		return given, nil
	}
	if r.stdin == nil {
		return "", nil
	}
	if f, ok := r.stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		ask := func(prompt string) (string, error) {
			fmt.Fprint(r.stderr, prompt)
			b, err := term.ReadPassword(int(f.Fd()))
			fmt.Fprintln(r.stderr)
			if err != nil {
				return "", fmt.Errorf("reading the password from the terminal: %w", err)
			}
			return string(b), nil
		}
		first, err := ask(fmt.Sprintf("New password for user %q: ", user))
		if err != nil || first == "" {
			return "", err
		}
		again, err := ask("Again: ")
		if err != nil {
			return "", err
		}
		if again != first {
			return "", usageErr("the two passwords differ")
		}
		return first, nil
	}
	// Not a terminal: the first line, read a byte at a time so that nothing after it is
	// waited for. Reading past the limit tells a password that is too long from one that
	// fills it.
	var b []byte
	one := make([]byte, 1)
	for len(b) <= wire.MaxPassword+1 {
		n, err := r.stdin.Read(one)
		if n == 1 {
			if one[0] == '\n' {
				break
			}
			b = append(b, one[0])
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", fmt.Errorf("reading the password from stdin: %w", err)
		}
	}
	return string(bytes.TrimSuffix(b, []byte("\r"))), nil
}
