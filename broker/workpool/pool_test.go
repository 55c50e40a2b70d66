package workpool

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestPoolRunsJobs(t *testing.T) {
	p := New(4, 100)
	var n atomic.Int64
	for range 100 {
		if !p.Submit(func() { n.Add(1) }) {
			t.Fatal("Submit refused with room in the queue")
		}
	}
	p.Close()
	if n.Load() != 100 {
		t.Fatalf("ran %d jobs, want 100", n.Load())
	}
}

func TestPoolFullQueueRefuses(t *testing.T) {
	p := New(1, 2)
	release := make(chan struct{})
	started := make(chan struct{})
	var ran atomic.Int64
	if !p.Submit(func() { close(started); <-release; ran.Add(1) }) {
		t.Fatal("first Submit refused")
	}
	<-started // the worker is busy; the queue is empty
	for i := range 2 {
		if !p.Submit(func() { ran.Add(1) }) {
			t.Fatalf("queued Submit %d refused", i)
		}
	}
	done := make(chan bool)
	go func() { done <- p.Submit(func() { ran.Add(1) }) }()
	select {
	case ok := <-done:
		if ok {
			t.Fatal("Submit accepted a job beyond the queue")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Submit blocked on a full queue")
	}
	if p.Queued() != 2 {
		t.Fatalf("Queued = %d", p.Queued())
	}
	close(release)
	p.Close()
	if ran.Load() != 3 {
		t.Fatalf("ran %d jobs, want 3", ran.Load())
	}
}

func TestPoolCloseDrains(t *testing.T) {
	p := New(1, 10)
	var n atomic.Int64
	for range 10 {
		p.Submit(func() { time.Sleep(time.Millisecond); n.Add(1) })
	}
	p.Close()
	if n.Load() != 10 {
		t.Fatalf("Close returned after %d of 10 jobs", n.Load())
	}
	if p.Submit(func() {}) {
		t.Fatal("Submit after Close accepted")
	}
	p.Close() // idempotent
}

func TestPoolConcurrentSubmitClose(t *testing.T) {
	p := New(2, 4)
	var accepted, ran atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if p.Submit(func() { ran.Add(1) }) {
					accepted.Add(1)
				}
			}
		})
	}
	time.Sleep(10 * time.Millisecond)
	p.Close()
	close(stop)
	wg.Wait()
	if ran.Load() != accepted.Load() {
		t.Fatalf("accepted %d jobs but ran %d", accepted.Load(), ran.Load())
	}
}
