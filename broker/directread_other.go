//go:build !linux

package broker

import "errors"

// directReadMin: reading a frame's rest from the socket is Linux only (SIOCINQ); elsewhere
// socketHolds says nothing is there and the frame waits for gnet's reads.
const directReadMin = 16 << 10

func socketHolds(int) int { return 0 }

func readSocket(int, []byte) error { return errors.New("direct socket reads are Linux only") }
