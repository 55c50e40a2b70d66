//go:build !linux

package broker

import "errors"

// directWrites: no direct delivery here (direct.go); subscribers' loops are woken.
const directWrites = false

func writev2(int, []byte, []byte) (int, error) { return 0, errors.New("direct delivery is Linux only") }
