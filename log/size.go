package log

// Size is the bytes of whole batches in the log's segment files: what retention.bytes
// counts (index, time-index and checkpoint files are not included). It takes the segment
// list's read lock for one pass over the segments (nanoseconds each), so an Append waits at
// most that long to publish. Safe for concurrent use, also after Close.
func (l *Log) Size() int64 {
	l.segMu.RLock()
	defer l.segMu.RUnlock()
	var n int64
	for _, s := range l.segs {
		n += s.size
	}
	return n
}
