package client_test

// Freezing a fake broker, as SIGSTOP freezes a real one: its connections stay open, nothing
// more is read from them nor answered, and new connections are accepted (the kernel's
// backlog does that for a stopped process) but their handshake waits. Thawing lets it go
// on with what it had read, as SIGCONT does.

// Freeze stops node id (1 for a fake of one broker) from serving its connections.
func (fb *fakeBroker) Freeze(id uint32) {
	fb.set(func(fb *fakeBroker) {
		if fb.frozen == nil {
			fb.frozen = make(map[uint32]bool)
		}
		fb.frozen[id] = true
	})
}

// Thaw lets node id serve its connections again.
func (fb *fakeBroker) Thaw(id uint32) { fb.set(func(fb *fakeBroker) { delete(fb.frozen, id) }) }

// admit is called by a connection's server with each frame read: it waits while the node is
// frozen (until the fake or the connection closes) and reports whether to handle the frame.
func (fc *fakeConn) admit() bool {
	fb := fc.fb
	fb.mu.Lock()
	defer fb.mu.Unlock()
	for fb.frozen[fc.node] && !fb.closed && !fc.dead {
		fb.cond.Wait()
	}
	return !fb.silent && !fb.closed && !fc.dead
}
