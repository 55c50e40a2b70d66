package broker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/lightq/lightq/broker/meta"
	"github.com/lightq/lightq/wire"
)

// groupSessions makes a broker without a cluster safe across its own restart the way a new
// coordinator in a cluster is safe across a move (takeOver, coordinator.go): group
// membership lives in memory, so a restarted broker knows none of the members of its
// previous run, and one of them that has not noticed the restart (its connection is being
// made again, or it is cut off) still processes its partitions until its local session
// deadline, nine tenths of its session after the broker's last answer (PROTOCOL.md 10.1).
// Giving those partitions to a member that joins the new run would make two holders. So
// the broker records, in <data dir>/group-sessions, the longest session timeout it granted,
// written and fsynced before the first JOIN_GROUP answer that grants a longer one, and at
// start withholds every group (group.Coordinator.WithholdAll) for the recorded value: the
// previous run's members all stopped by then, since their last answer came before the
// crash. The record is lowered to what this run granted once that withhold ends (the
// previous run's members are gone by then), so one long session does not cost every later
// restart.
//
// Invariant: the file's value is at least every session this run answered a JOIN_GROUP
// with, and, until the start withhold ends, at least every session the previous run may
// have granted. A join whose session is at most stored is answered without I/O.
//
// Concurrency: admit runs on event loops (a mutex around two durations, never held across
// I/O); raise and lower write the file, raise on the meta pool, lower on the timer that ends
// the start withhold; fileMu serialises them. Lock order: fileMu, then mu (a leaf).
type groupSessions struct {
	path string

	fileMu sync.Mutex
	err    error // under fileMu: a failed raise, sticky (longer sessions are refused)
	closed bool  // under fileMu: no more writes (the broker shut down)
	timer  *time.Timer

	mu     sync.Mutex
	stored time.Duration // under mu: at most the file's value; a join within it needs no write
	run    time.Duration // under mu: the longest session this run grants or granted
}

// groupSessionsFile is the file's name in the data directory. NEVER CHANGE: existing data
// directories have it.
const groupSessionsFile = "group-sessions"

// The file's layout (16 bytes, big-endian). NEVER CHANGE.
//
//	 0        4        8
//	+--------+--------+-------------------+
//	| "LQGS" | crc32c | longest session   |   crc32c of bytes 8-15; the longest session
//	|        | 8..16  | timeout, ms u64   |   timeout a member may still be running with
//	+--------+--------+-------------------+
const groupSessionsMagic = "LQGS"

// openGroupSessions reads the file and returns the record and the withhold the broker owes
// its previous run. A data directory of a broker from before the file existed has none:
// its members most likely ran with the default session (missing, Config.Groups.SessionTimeout;
// one that asked for longer may overlap the new run by the difference, once, at the upgrade),
// which spares every group a withhold of the longest session allowed on an upgrade. A damaged
// file is unknown, so the longest allowed is assumed (unknown, MaxSessionTimeout). A new data
// directory (fresh) owes nothing: its groups had no members. The file is (re)written with the value before the broker answers
// anything, so a crash right after start withholds as long again.
func openGroupSessions(dataDir string, missing, unknown time.Duration, fresh bool) (gs *groupSessions, prev time.Duration, warn, err error) {
	gs = &groupSessions{path: filepath.Join(dataDir, groupSessionsFile)}
	b, rerr := os.ReadFile(gs.path)
	switch {
	case errors.Is(rerr, fs.ErrNotExist):
		if !fresh {
			prev = missing
			warn = fmt.Errorf("%s is missing (a data directory of an older broker): every group's partitions are withheld for the default session, %v; a member of the previous run with a longer session may still process its partitions for the difference", gs.path, missing)
		}
	case rerr != nil:
		return nil, 0, nil, fmt.Errorf("group sessions: %w", rerr)
	default:
		var ok bool
		if prev, ok = decodeGroupSessions(b); !ok {
			prev = unknown
			warn = fmt.Errorf("%s is damaged (%d bytes, not a valid record): every group's partitions are withheld for the longest session allowed, %v, and the file is written again", gs.path, len(b), unknown)
		}
	}
	if err := gs.write(prev); err != nil {
		return nil, 0, nil, err
	}
	gs.stored = prev
	return gs, prev, warn, nil
}

// withholdAtStart opens the record of a broker without a cluster and withholds every group
// for what it owes the previous run (see groupSessions). A data directory without durable
// topics is taken as new: no group of it can have had members.
func (s *Server) withholdAtStart(st meta.State) error {
	fresh := true
	for _, t := range st.Topics {
		if t.Kind == wire.KindDurable {
			fresh = false
			break
		}
	}
	gs, prev, warn, err := openGroupSessions(s.cfg.DataDir, s.cfg.Groups.SessionTimeout, s.cfg.Groups.MaxSessionTimeout, fresh)
	if err != nil {
		return err
	}
	if warn != nil {
		s.log.Warn().Err(warn).Msg("group sessions")
	}
	s.sessions = gs
	if prev > 0 {
		s.groups.WithholdAll(prev)
		gs.lowerAfter(prev, func(err error) {
			s.log.Warn().Err(err).Msg("group sessions: the record stays at the previous run's longest session until the next write")
		})
		s.log.Info().Dur("withhold", prev).
			Msg("consumer groups: every group's partitions are withheld for the longest session timeout of the previous run, whose members may still be processing them")
	}
	return nil
}

// maxRecordedSession bounds a record's value: far above any session (5 min by default),
// far below what a time.Duration holds.
const maxRecordedSession = (1 << 40) * time.Millisecond

// encodeGroupSessions is the file's content for d (rounded up to a millisecond).
func encodeGroupSessions(d time.Duration) []byte {
	b := make([]byte, 16)
	copy(b, groupSessionsMagic)
	binary.BigEndian.PutUint64(b[8:], uint64((d+time.Millisecond-1)/time.Millisecond))
	binary.BigEndian.PutUint32(b[4:], wire.Checksum(b[8:]))
	return b
}

// decodeGroupSessions reads the file's content: the recorded session, or false when b is
// not a valid record.
func decodeGroupSessions(b []byte) (time.Duration, bool) {
	if len(b) != 16 || string(b[:4]) != groupSessionsMagic || binary.BigEndian.Uint32(b[4:]) != wire.Checksum(b[8:16]) {
		return 0, false
	}
	ms := binary.BigEndian.Uint64(b[8:])
	if ms > uint64(maxRecordedSession/time.Millisecond) {
		return 0, false
	}
	return time.Duration(ms) * time.Millisecond, true
}

// write records d: temp file, fsync, rename, directory fsync.
func (gs *groupSessions) write(d time.Duration) error {
	if err := writeFileDurable(gs.path, encodeGroupSessions(min(d, maxRecordedSession))); err != nil {
		return fmt.Errorf("group sessions: recording %v in %s: %w", d, gs.path, err)
	}
	return nil
}

// writeFileDurable replaces path with b so that a crash leaves the old or the new content:
// a temp file written and fsynced, renamed over path, the directory fsynced.
func writeFileDurable(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err == nil {
		_, err = f.Write(b)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		var d *os.File
		if d, err = os.Open(filepath.Dir(path)); err == nil {
			err = d.Sync()
			d.Close()
		}
	}
	return err
}

// admit counts a JOIN_GROUP granting session d and reports whether the record covers it
// already (then answer at once; else raise first). On event loops; no I/O.
func (gs *groupSessions) admit(d time.Duration) bool {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	gs.run = max(gs.run, d)
	return d <= gs.stored
}

// raise records a session of at least d (what this run granted, admit having counted d)
// before its JOIN_GROUP is answered. It blocks on the disk: run it on a worker.
func (gs *groupSessions) raise(d time.Duration) error {
	gs.fileMu.Lock()
	defer gs.fileMu.Unlock()
	gs.mu.Lock()
	v, covered := gs.run, d <= gs.stored
	gs.mu.Unlock()
	switch {
	case covered:
		return nil // another raise wrote enough meanwhile
	case gs.err != nil:
		return gs.err
	case gs.closed:
		return errors.New("group sessions: the broker is shutting down")
	}
	if err := gs.write(v); err != nil {
		gs.err = err
		return err
	}
	gs.mu.Lock()
	gs.stored = max(gs.stored, v)
	gs.mu.Unlock()
	return nil
}

// lowerAfter lowers the record to what this run granted once the start withhold, of d,
// has ended (the previous run's members are gone by then). Nothing when d is 0.
func (gs *groupSessions) lowerAfter(d time.Duration, logf func(error)) {
	if d <= 0 {
		return
	}
	gs.fileMu.Lock()
	defer gs.fileMu.Unlock()
	gs.timer = time.AfterFunc(d, func() {
		if err := gs.lower(); err != nil {
			logf(err)
		}
	})
}

// lower writes what this run granted, if less than the record. stored goes down first, so
// a join above the new value waits for fileMu and writes after this (raise); until the
// rename the file still holds the higher value, which covers the joins answered meanwhile.
// A failed write leaves the file higher than stored, which is safe.
func (gs *groupSessions) lower() error {
	gs.fileMu.Lock()
	defer gs.fileMu.Unlock()
	if gs.closed || gs.err != nil {
		return nil
	}
	gs.mu.Lock()
	v := gs.run
	if v >= gs.stored {
		gs.mu.Unlock()
		return nil
	}
	gs.stored = v
	gs.mu.Unlock()
	return gs.write(v)
}

// close stops the pending lower and waits for a write in progress (at shutdown, before the
// data directory may go).
func (gs *groupSessions) close() {
	gs.fileMu.Lock()
	defer gs.fileMu.Unlock()
	gs.closed = true
	if gs.timer != nil {
		gs.timer.Stop()
	}
}
