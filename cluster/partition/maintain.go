package partition

import (
	"time"
)

// maintain is the partition's background goroutine: it answers batches whose wait passed
// ProposalTimeout, syncs the log on the interval policy, checkpoints the producer state,
// applies retention and expires idle producers, so that none of it runs on an event loop or
// on the replica's goroutine.
func (p *Partition) maintain() {
	defer close(p.done)
	sweep := time.NewTicker(max(p.cfg.ProposalTimeout/8, 10*time.Millisecond))
	defer sweep.Stop()
	ckpt := time.NewTicker(p.cfg.CheckpointInterval)
	defer ckpt.Stop()
	expiry := time.NewTicker(producerSweep)
	defer expiry.Stop()
	var syncC, retC <-chan time.Time
	if p.cfg.Fsync > 0 {
		t := time.NewTicker(time.Duration(p.cfg.Fsync))
		defer t.Stop()
		syncC = t.C
	}
	if p.cfg.Log.RetentionBytes > 0 || p.cfg.Log.RetentionAge > 0 {
		t := time.NewTicker(p.cfg.RetentionCheck)
		defer t.Stop()
		retC = t.C
	}
	for {
		select {
		case <-p.stop:
			return
		case now := <-sweep.C:
			p.expire(now)
		case <-syncC:
			if _, err := p.st.Log().Sync(); err != nil {
				p.logf("sync: %v", err) // the log is broken now; the replica stops at its next append
			}
		case <-ckpt.C:
			if err := p.checkpoint(false); err != nil {
				p.logf("%v", err)
			}
		case <-retC:
			p.retain()
		case <-expiry.C:
			p.mu.Lock()
			p.dd.table.Expire(time.Now().UnixMilli())
			p.mu.Unlock()
		}
	}
}

// checkpoint saves the producer state, as of the index the table reflects, in the
// checkpoint file, unless it did not change since the last one (force: even then). The log
// is synced first, so that the checkpoint never reflects an entry this replica could lose in
// a power cut (with fsync=always it is synced already).
func (p *Partition) checkpoint(force bool) error {
	p.ckMu.Lock()
	defer p.ckMu.Unlock()
	p.mu.Lock()
	index := p.dd.index
	if index == p.ckIndex && !force {
		p.mu.Unlock()
		return nil
	}
	p.ckBuf = appendState(p.ckBuf[:0], index, nil, p.dd.table, p.hw.Load(), time.Now().UnixMilli())
	p.mu.Unlock()
	if _, err := p.st.Log().Sync(); err != nil {
		return err
	}
	if err := writeCheckpoint(p.fsys, p.cfg.Dir, p.ckBuf); err != nil {
		return err
	}
	p.ckIndex = index
	if cap(p.ckBuf) > 4<<20 {
		p.ckBuf = nil
	}
	return nil
}

// retain applies the log's retention to the entries the checkpoint reflects: a segment
// leaves only once the producer state of its batches is saved (a restart then needs none of
// it). When the log is over its byte limit with sealed segments to delete, it checkpoints
// first, so retention does not wait for the next periodic checkpoint.
func (p *Partition) retain() {
	l := p.st.Log()
	if rb := p.cfg.Log.RetentionBytes; rb > 0 && l.Size() > rb && !l.InActiveSegment(l.StartOffset()) {
		if err := p.checkpoint(false); err != nil {
			p.logf("%v", err)
			return
		}
	}
	p.ckMu.Lock()
	limit := p.ckIndex
	p.ckMu.Unlock()
	if limit == 0 {
		return
	}
	if err := p.st.EnforceRetention(limit); err != nil {
		p.logf("retention: %v", err)
	}
}
