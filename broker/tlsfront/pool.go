package tlsfront

import (
	"io"
	"math/bits"
	"sync"
)

// errEOF is io.EOF; rawConn returns it when the client closed its side.
var errEOF = io.EOF

// Buffers are pooled by power-of-two size class, from 16 KiB to 2 MiB (a Pipe's inbox holds
// a whole frame), so that an idle session holds none: a session takes one only once its
// socket has data and gives it back once the data is passed on.
const (
	minClass = 14 // 16 KiB
	maxClass = 21 // 2 MiB
)

var pools [maxClass - minClass + 1]sync.Pool

func class(n int) int {
	c := bits.Len(uint(max(n, 1) - 1))
	return min(max(c, minClass), maxClass)
}

// getBuf returns a buffer of at least n bytes (at most 2 MiB) of its class's full size.
func getBuf(n int) *[]byte {
	c := class(n)
	if b, ok := pools[c-minClass].Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, 1<<c)
	return &b
}

// getBufAtLeast is getBuf for any n: past 2 MiB it allocates one of n bytes, which putBuf
// then drops.
func getBufAtLeast(n int) *[]byte {
	if n > 1<<maxClass {
		b := make([]byte, n)
		return &b
	}
	return getBuf(n)
}

// putBuf returns a buffer from getBuf; a buffer of another capacity is dropped.
func putBuf(b *[]byte) {
	c := class(cap(*b))
	if cap(*b) != 1<<c {
		return
	}
	*b = (*b)[:cap(*b)]
	pools[c-minClass].Put(b)
}
