package workpool

import "sync"

// Pool runs blocking jobs on a fixed number of worker goroutines with a bounded queue (see
// the package doc). A Pool is safe for concurrent use. A job that panics crashes the process,
// as it would anywhere else.
type Pool struct {
	mu     sync.RWMutex // guards closed against the close of jobs
	closed bool
	jobs   chan func()
	wg     sync.WaitGroup
}

// New starts workers goroutines (at least 1) behind a queue of queue waiting jobs (at
// least 0; with 0 a job is accepted only when a worker is idle).
func New(workers, queue int) *Pool {
	p := &Pool{jobs: make(chan func(), max(queue, 0))}
	for range max(workers, 1) {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for job := range p.jobs {
				job()
			}
		}()
	}
	return p
}

// Submit queues job and reports whether it was accepted. It never blocks: it returns false
// when the queue is full (answer RESOURCE_LIMIT and let the client retry) or the pool is
// closed. job must not be nil. Safe for concurrent use, including from event loops.
func (p *Pool) Submit(job func()) bool {
	if job == nil {
		panic("workpool: Pool.Submit(nil)")
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return false
	}
	select {
	case p.jobs <- job:
		return true
	default:
		return false
	}
}

// Queued returns the number of jobs waiting for a worker. Safe for concurrent use.
func (p *Pool) Queued() int { return len(p.jobs) }

// Close stops accepting jobs, waits for the queued and running ones to finish and stops the
// workers. It is idempotent and safe for concurrent use, but must not be called from a job
// (it would wait for itself).
func (p *Pool) Close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.jobs)
	}
	p.mu.Unlock()
	p.wg.Wait()
}
