package ring

import "testing"

// TestSpanMatchesMessages: between writes, the lock-free Span is exactly Messages: on an
// empty ring, as batches are evicted by slots and by bytes, and after a Reserve that evicted
// everything was aborted.
func TestSpanMatchesMessages(t *testing.T) {
	check := func(r *Ring, when string) {
		t.Helper()
		o1, n1 := r.Messages()
		o2, n2 := r.Span()
		if o1 != o2 || n1 != n2 {
			t.Fatalf("%s: Messages (%d, %d), Span (%d, %d)", when, o1, n1, o2, n2)
		}
	}
	for _, tc := range []struct {
		name              string
		arena, slots, val int
	}{{"slots", 1 << 20, 4, 100}, {"bytes", 8 << 10, 1024, 900}} {
		t.Run(tc.name, func(t *testing.T) {
			r := New(tc.arena, tc.slots)
			check(r, "empty")
			for i := 0; i < 50; i++ {
				if _, err := r.Append(makeBatch(t, uint64(i), 1+i%3, tc.val), uint32(1+i%3)); err != nil {
					t.Fatal(err)
				}
				check(r, "after an append")
			}
			// A batch of half the arena evicts whatever overlaps it; abort it.
			if _, err := r.Reserve(r.MaxBatch()); err != nil {
				t.Fatal(err)
			}
			r.Abort()
			check(r, "after an aborted reserve")
		})
	}
}

// TestSpanDuringWrites: read while a writer appends and evicts, Span never has oldest past
// next and never goes back.
func TestSpanDuringWrites(t *testing.T) {
	r := New(8<<10, 8)
	batch := makeBatch(t, 1, 2, 500)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for i := 0; i < 20000; i++ {
			if _, err := r.Append(batch, 2); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	var lastOldest, lastNext uint64
	for running := true; running; {
		select {
		case <-finished:
			running = false
		default:
		}
		oldest, next := r.Span()
		if oldest > next || oldest < lastOldest || next < lastNext {
			t.Fatalf("span (%d, %d) after (%d, %d)", oldest, next, lastOldest, lastNext)
		}
		lastOldest, lastNext = oldest, next
	}
	if lastNext != 40000 {
		t.Fatalf("span ends at %d, want 40000", lastNext)
	}
}
