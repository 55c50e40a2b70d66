package meta

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// FileName is the metadata file inside the store's directory.
const FileName = "meta.json"

// tempPrefix starts the names of temporary files; Open removes any it finds.
const tempPrefix = FileName + ".tmp-"

// BackupV1 is where Open keeps a format 1 meta.json it migrated, in the store's directory, so
// that the broker that wrote it can still be started on a copy of the old file.
const BackupV1 = FileName + ".v1"

// ErrBroken is wrapped by Update's errors once a failed write could not be rolled back, so
// the file on disk may differ from the state in memory. Restart the broker (Open re-reads
// the file).
var ErrBroken = errors.New("meta: store broken by an earlier write failure")

// Store is the broker's metadata, kept in memory and in dir/meta.json. Safe for concurrent
// use.
type Store struct {
	dir  string
	path string
	fs   fsys

	writeMu sync.Mutex // serialises Update; taken before mu
	onDisk  []byte     // content of meta.json, nil if it does not exist; guarded by writeMu
	broken  error      // sticky: a write failed and could not be undone; guarded by writeMu

	mu    sync.RWMutex // guards state
	state State

	migratedFrom int // the format version Open migrated from; 0 if none. Set by Open only.
}

// Open opens the store in dir, creating dir (mode 0700) if it is missing, and loads
// dir/meta.json. A missing file is an empty state. A file that cannot be read, decoded or
// validated is an error that names it, wrapping ErrCorrupt or ErrInvalid. Temporary files
// left by a crash are removed. A file of format version 1 is migrated: copied to BackupV1,
// then rewritten in the current format (both atomically and durably; see MigratedFrom).
func Open(dir string) (*Store, error) {
	return openFS(dir, osFS{})
}

func openFS(dir string, fsys fsys) (*Store, error) {
	s := &Store{dir: dir, path: filepath.Join(dir, FileName), fs: fsys}
	if err := fsys.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("meta: creating %s: %w", dir, err)
	}
	entries, err := fsys.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("meta: listing %s: %w", dir, err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tempPrefix) {
			// Left by a crash before the rename; its Update never returned success.
			if err := fsys.Remove(filepath.Join(dir, e.Name())); err != nil {
				return nil, fmt.Errorf("meta: removing leftover %s: %w", e.Name(), err)
			}
		}
	}
	data, err := fsys.ReadFile(s.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		s.state = State{}
		s.state.normalize()
		return s, nil
	case err != nil:
		return nil, fmt.Errorf("meta: reading %s: %w", s.path, err)
	}
	st, version, err := unmarshal(data)
	if err == nil {
		err = st.Validate()
	}
	if err != nil {
		return nil, fmt.Errorf("meta: %s: %w", s.path, err)
	}
	s.state, s.onDisk = st, data
	if version != FormatVersion {
		if err := s.migrate(data); err != nil {
			return nil, fmt.Errorf("meta: migrating %s from format %d to %d: %w", s.path, version, FormatVersion, err)
		}
		s.migratedFrom = version
	}
	return s, nil
}

// migrate keeps the old file's bytes as BackupV1 and rewrites meta.json in the current format.
// A crash in between leaves the old meta.json, which the next Open migrates again.
func (s *Store) migrate(old []byte) error {
	next, err := marshal(s.state)
	if err != nil {
		return err
	}
	if err := s.replaceFile(filepath.Join(s.dir, BackupV1), old); err != nil {
		return err
	}
	if err := s.persist(next); err != nil {
		return err
	}
	s.onDisk = next
	return nil
}

// MigratedFrom is the format version of the meta.json that Open migrated to the current one
// (keeping the old file as BackupV1), or 0 when it needed no migration. Safe for concurrent use.
func (s *Store) MigratedFrom() int { return s.migratedFrom }

// Dir returns the store's directory.
func (s *Store) Dir() string { return s.dir }

// State returns a deep copy of the current state. Safe for concurrent use; it does not wait
// for an Update in progress.
func (s *Store) State() State {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.state.Clone()
}

// User returns the named user. Safe for concurrent use.
func (s *Store) User(name string) (User, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	u, ok := s.state.Users[name]
	return u, ok
}

// Topic returns a copy of the named topic. Safe for concurrent use.
func (s *Store) Topic(name string) (Topic, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	t, ok := s.state.Topics[name]
	t.Options = slices.Clone(t.Options)
	return t, ok
}

// Update applies fn to a copy of the state, validates the result, writes it to disk
// atomically and durably, and only then makes it the current state. If fn, validation or
// any disk step fails, Update returns the error and both the in-memory state and meta.json
// are as before. fn must not keep the *State after it returns. An Update that changes
// nothing writes nothing. Updates are serialised; safe for concurrent use. It blocks on
// fsync: call it from a worker, never from an event loop.
func (s *Store) Update(fn func(*State) error) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if s.broken != nil {
		return fmt.Errorf("%w: %v", ErrBroken, s.broken)
	}
	next := s.state.Clone() // s.state only changes under writeMu, which we hold
	if err := fn(&next); err != nil {
		return err
	}
	next.normalize()
	if err := next.Validate(); err != nil {
		return err
	}
	data, err := marshal(next)
	if err != nil {
		return err
	}
	if bytes.Equal(data, s.onDisk) {
		return nil
	}
	if err := s.persist(data); err != nil {
		return err
	}
	next = next.Clone() // in case fn kept a reference after all
	s.mu.Lock()
	s.state = next
	s.mu.Unlock()
	s.onDisk = data
	return nil
}

// persist replaces meta.json with data. On failure it leaves meta.json as it was, or, if
// that cannot be ensured, marks the store broken. s.writeMu must be held.
func (s *Store) persist(data []byte) error {
	if err := s.replace(data); err != nil {
		return err
	}
	if err := s.fs.SyncDir(s.dir); err != nil {
		err = fmt.Errorf("meta: syncing directory %s: %w", s.dir, err)
		// The rename happened but may not be durable; the caller will be told the update
		// failed, so put the previous content back.
		if rbErr := s.rollback(); rbErr != nil {
			s.broken = fmt.Errorf("%v; rolling back: %v", err, rbErr)
			return fmt.Errorf("%w: %v", ErrBroken, s.broken)
		}
		return err
	}
	return nil
}

// replace writes data to a temporary file, fsyncs it and renames it over meta.json. On
// failure the temporary file is removed and meta.json is untouched.
func (s *Store) replace(data []byte) error { return s.replaceFile(s.path, data) }

// replaceFile writes data to a temporary file in the store's directory, fsyncs it and renames
// it to path. On failure the temporary file is removed and path is untouched. The caller
// fsyncs the directory.
func (s *Store) replaceFile(path string, data []byte) (err error) {
	f, err := s.fs.CreateTemp(s.dir, tempPrefix+"*")
	if err != nil {
		return fmt.Errorf("meta: creating temporary file in %s: %w", s.dir, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			s.fs.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("meta: writing %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("meta: syncing %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("meta: closing %s: %w", tmp, err)
	}
	if err := s.fs.Rename(tmp, path); err != nil {
		return fmt.Errorf("meta: renaming %s to %s: %w", tmp, path, err)
	}
	return nil
}

// rollback restores meta.json to s.onDisk (or removes it if there was none) and syncs the
// directory.
func (s *Store) rollback() error {
	if s.onDisk == nil {
		if err := s.fs.Remove(s.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	} else if err := s.replace(s.onDisk); err != nil {
		return err
	}
	return s.fs.SyncDir(s.dir)
}
