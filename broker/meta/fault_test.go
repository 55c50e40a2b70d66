package meta

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
)

var errInjected = errors.New("injected fault")

// faultFS is the real file system with failures injected per operation: "create", "write",
// "sync", "close", "rename", "syncdir", "remove".
type faultFS struct {
	osFS
	mu    sync.Mutex
	skip  map[string]int // operation -> calls that succeed before fail applies
	fail  map[string]int // operation -> failures left; -1 = forever
	calls map[string]int
}

func newFaultFS() *faultFS {
	return &faultFS{skip: map[string]int{}, fail: map[string]int{}, calls: map[string]int{}}
}

func (f *faultFS) check(op string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[op]++
	if f.skip[op] > 0 {
		f.skip[op]--
		return nil
	}
	switch n := f.fail[op]; {
	case n < 0:
		return errInjected
	case n > 0:
		f.fail[op] = n - 1
		return errInjected
	}
	return nil
}

func (f *faultFS) CreateTemp(dir, pattern string) (file, error) {
	if err := f.check("create"); err != nil {
		return nil, err
	}
	of, err := f.osFS.CreateTemp(dir, pattern)
	if err != nil {
		return nil, err
	}
	return &faultFile{file: of, fs: f}, nil
}

func (f *faultFS) Rename(oldpath, newpath string) error {
	if err := f.check("rename"); err != nil {
		return err
	}
	return f.osFS.Rename(oldpath, newpath)
}

func (f *faultFS) SyncDir(dir string) error {
	if err := f.check("syncdir"); err != nil {
		return err
	}
	return f.osFS.SyncDir(dir)
}

func (f *faultFS) Remove(name string) error {
	if err := f.check("remove"); err != nil {
		return err
	}
	return f.osFS.Remove(name)
}

type faultFile struct {
	file
	fs *faultFS
}

func (f *faultFile) Write(p []byte) (int, error) {
	if err := f.fs.check("write"); err != nil {
		n, _ := f.file.Write(p[:len(p)/2]) // a short write, as on a full disk
		return n, err
	}
	return f.file.Write(p)
}

func (f *faultFile) Sync() error {
	if err := f.fs.check("sync"); err != nil {
		return err
	}
	return f.file.Sync()
}

func (f *faultFile) Close() error {
	err := f.file.Close() // really close, so the test can remove the file
	if ferr := f.fs.check("close"); ferr != nil {
		return ferr
	}
	return err
}

func tempFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tempPrefix) {
			names = append(names, e.Name())
		}
	}
	return names
}

// A failure at any step of a write leaves the file and the in-memory state as before, and
// the next Update works.
func TestUpdateFaultLeavesEverythingAsBefore(t *testing.T) {
	for _, op := range []string{"create", "write", "sync", "close", "rename", "syncdir"} {
		for _, first := range []bool{true, false} {
			name := op
			if first {
				name += "/first write"
			}
			t.Run(name, func(t *testing.T) {
				dir := t.TempDir()
				f := newFaultFS()
				s, err := openFS(dir, f)
				if err != nil {
					t.Fatal(err)
				}
				if !first {
					if err := s.Update(seed); err != nil {
						t.Fatal(err)
					}
				}
				before := s.State()
				fileBefore, errBefore := os.ReadFile(filepath.Join(dir, FileName))

				f.fail[op] = 1
				change := seed
				if !first {
					change = addTopic("new")
				}
				if err := s.Update(change); !errors.Is(err, errInjected) {
					t.Fatalf("Update error %v, want the injected fault", err)
				}
				if !reflect.DeepEqual(s.State(), before) {
					t.Fatal("in-memory state changed")
				}
				fileAfter, errAfter := os.ReadFile(filepath.Join(dir, FileName))
				if !bytes.Equal(fileBefore, fileAfter) || (errBefore == nil) != (errAfter == nil) {
					t.Fatalf("file changed: before %d bytes (%v), after %d bytes (%v)", len(fileBefore), errBefore, len(fileAfter), errAfter)
				}
				if tmp := tempFiles(t, dir); len(tmp) != 0 {
					t.Fatalf("temp files left: %v", tmp)
				}
				if !reflect.DeepEqual(mustOpen(t, dir).State(), before) {
					t.Fatal("reopened state differs from the state before the failed Update")
				}

				// The store still works.
				if err := s.Update(change); err != nil {
					t.Fatalf("Update after the fault: %v", err)
				}
				if !reflect.DeepEqual(mustOpen(t, dir).State(), s.State()) {
					t.Fatal("reopened state differs after recovery")
				}
			})
		}
	}
}

// When the directory sync fails and the rollback fails too, the store refuses further
// Updates rather than let memory and disk drift apart; the in-memory state stays as before.
func TestUpdateBrokenWhenRollbackFails(t *testing.T) {
	dir := t.TempDir()
	f := newFaultFS()
	s, err := openFS(dir, f)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(seed); err != nil {
		t.Fatal(err)
	}
	before := s.State()
	f.fail["syncdir"] = -1
	if err := s.Update(addTopic("new")); !errors.Is(err, ErrBroken) {
		t.Fatalf("Update error %v, want ErrBroken", err)
	}
	f.fail["syncdir"] = 0
	if err := s.Update(addTopic("other")); !errors.Is(err, ErrBroken) {
		t.Fatalf("Update after breaking: %v, want ErrBroken", err)
	}
	if !reflect.DeepEqual(s.State(), before) {
		t.Fatal("in-memory state changed")
	}
}
