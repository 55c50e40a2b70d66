package broker

import "sync"

// prefetchBuf holds the scratch buffers workers read cold chunks into.
var prefetchBuf = sync.Pool{New: func() any { b := make([]byte, 1<<20); return &b }}
