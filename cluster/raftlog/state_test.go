package raftlog

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/lightq/lightq/log/vfs"
	"github.com/lightq/lightq/log/vfs/crashfs"
)

func sampleState(term uint64) State {
	return State{
		HardState: raftpb.HardState{Term: term, Vote: 2, Commit: 10 * term},
		ConfState: raftpb.ConfState{Voters: []uint64{1, 2, 3}, Learners: []uint64{4}},
		ConfIndex: 3, SnapIndex: term, SnapTerm: term - 1,
		FirstOffset: int64(term) * 100, ResetPending: term%2 == 0, InstallPending: term%4 == 0,
	}
}

// slotV1 encodes st as version 1 wrote it: no first offset, no flags.
func slotV1(st State, seq uint64) []byte {
	cs, err := st.ConfState.Marshal()
	if err != nil {
		panic(err)
	}
	b := append([]byte(stateMagic), 1, 0, 0, 0)
	b = binary.BigEndian.AppendUint64(b, seq)
	b = binary.BigEndian.AppendUint32(b, uint32(fixedPayload1+len(cs)))
	b = append(b, 0, 0, 0, 0)
	for _, v := range []uint64{st.HardState.Term, st.HardState.Vote, st.HardState.Commit, st.ConfIndex, st.SnapIndex, st.SnapTerm} {
		b = binary.BigEndian.AppendUint64(b, v)
	}
	b = append(b, cs...)
	binary.BigEndian.PutUint32(b[20:], crc32.Update(crc32.Checksum(b[8:20], castagnoli), castagnoli, b[slotHeader:]))
	return b
}

// TestStateVersion1: a slot written by version 1 (no first offset, no flags) is read, with
// the first offset unknown.
func TestStateVersion1(t *testing.T) {
	st := sampleState(3)
	b := slotV1(st, 7)
	got, seq, err := decodeSlot(b)
	want := st
	want.FirstOffset, want.ResetPending = -1, false
	if err != nil || seq != 7 || !reflect.DeepEqual(got, want) {
		t.Fatalf("version 1: %+v seq %d %v; want %+v", got, seq, err, want)
	}
	// Version 2 refuses unknown flags and a first offset below -1.
	for _, mangle := range []func(b []byte){
		func(b []byte) { b[slotHeader+7*8+7] |= 4 },
		func(b []byte) { binary.BigEndian.PutUint64(b[slotHeader+6*8:], uint64(1<<63)) },
	} {
		good, _ := encodeSlot(nil, 1, &st)
		mangle(good)
		binary.BigEndian.PutUint32(good[20:], crc32.Update(crc32.Checksum(good[8:20], castagnoli), castagnoli, good[slotHeader:]))
		if _, _, err := decodeSlot(good); err == nil {
			t.Fatal("a slot with unknown flags or a bad first offset was accepted")
		}
	}
}

func TestStateRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "raft.state")
	sf, st, err := OpenState(vfs.OS, path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(st, State{}) || sf.Saved() {
		t.Fatalf("new file: %+v, saved %v", st, sf.Saved())
	}
	for term := uint64(1); term <= 5; term++ {
		if err := sf.Save(sampleState(term), term%2 == 1); err != nil {
			t.Fatal(err)
		}
	}
	sf.Close()
	sf, st, err = OpenState(vfs.OS, path)
	if err != nil {
		t.Fatal(err)
	}
	defer sf.Close()
	if want := sampleState(5); !reflect.DeepEqual(st, want) {
		t.Fatalf("got %+v, want %+v", st, want)
	}
}

func TestStateDamage(t *testing.T) {
	cases := []struct {
		name    string
		damage  func(b []byte) []byte
		want    uint64 // term expected back; 0: ErrDamagedState
		wantErr bool
	}{
		{"newest slot torn", func(b []byte) []byte { b[slotSize+slotHeader+3] ^= 1; return b }, 3, false},
		{"older slot torn", func(b []byte) []byte { b[slotHeader] ^= 1; return b }, 4, false},
		{"file cut inside the newest slot", func(b []byte) []byte { return b[:slotSize+40] }, 3, false},
		{"both slots torn", func(b []byte) []byte { b[20] ^= 1; b[slotSize+20] ^= 1; return b }, 0, true},
		{"garbage", func(b []byte) []byte {
			return []byte("not a state file at all, but long enough to look at it............")
		}, 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "raft.state")
			sf, _, err := OpenState(vfs.OS, path)
			if err != nil {
				t.Fatal(err)
			}
			for term := uint64(1); term <= 4; term++ { // term 3 in slot 1... seq 3 -> slot 1, seq 4 -> slot 0
				if err := sf.Save(sampleState(term), true); err != nil {
					t.Fatal(err)
				}
			}
			sf.Close()
			b := readFile(t, path)
			// seq 4 (term 4) is in slot 0, seq 3 (term 3) in slot 1: make "newest" mean slot 0.
			b = swapSlots(b)
			writeFile(t, path, tc.damage(b))
			sf, st, err := OpenState(vfs.OS, path)
			if tc.wantErr {
				if !errors.Is(err, ErrDamagedState) {
					t.Fatalf("got %v, want ErrDamagedState", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer sf.Close()
			if st.HardState.Term != tc.want {
				t.Fatalf("term %d, want %d", st.HardState.Term, tc.want)
			}
		})
	}
}

// swapSlots puts the newer slot second, so the cases can damage "the newest" at slot 1.
func swapSlots(b []byte) []byte {
	out := append([]byte(nil), b[slotSize:2*slotSize]...)
	return append(out, b[:slotSize]...)
}

// TestStatePowerLoss saves states with sync and cuts the power at random points, some of them
// inside the file's creation: what opens afterwards is the last synced state or one saved
// after it, never older, never damaged (a new file's first slot is written whole).
func TestStatePowerLoss(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	created := 0
	for round := range 1000 {
		fsys := crashfs.New()
		dir := t.TempDir()
		path := filepath.Join(dir, "raft.state")
		inCreate := round%5 == 0
		if inCreate {
			fsys.KillAfter(1 + rng.IntN(5))
		}
		var synced uint64
		sf, _, err := OpenState(fsys, path)
		if err == nil {
			if !inCreate {
				fsys.KillAfter(1 + rng.IntN(12))
			}
			for term := uint64(1); term <= 10; term++ {
				sync := rng.IntN(2) == 0
				if err := sf.Save(sampleState(term), sync); err != nil {
					break
				}
				if sync {
					synced = term
				}
			}
		} else if inCreate {
			created++
		}
		if err := fsys.Crash(rng); err != nil {
			t.Fatal(err)
		}
		sf2, st, err := OpenState(fsys, path)
		if err != nil {
			t.Fatalf("round %d: %v (last synced term %d)", round, err, synced)
		}
		if st.HardState.Term < synced {
			t.Fatalf("round %d: term %d after the crash, but term %d was synced", round, st.HardState.Term, synced)
		}
		if st.HardState.Term != 0 && !reflect.DeepEqual(st, sampleState(st.HardState.Term)) || st.HardState.Term == 0 && (!reflect.DeepEqual(st, State{}) || sf2.Saved()) {
			t.Fatalf("round %d: state %+v is none that was saved", round, st)
		}
		sf2.Close()
	}
	if created == 0 {
		t.Fatal("no crash happened inside a file's creation")
	}
}

func FuzzDecodeSlot(f *testing.F) {
	st := sampleState(9)
	good, _ := encodeSlot(nil, 4, &st)
	f.Add(good)
	f.Add(good[:30])
	f.Add(slotV1(st, 5))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, seq, err := decodeSlot(b)
		if err != nil {
			return
		}
		again, err := encodeSlot(nil, seq, &st)
		if err != nil {
			t.Fatal(err)
		}
		st2, seq2, err := decodeSlot(again)
		if err != nil || seq2 != seq || !reflect.DeepEqual(st, st2) {
			t.Fatalf("re-encoding changed the state: %v", err)
		}
	})
}
