//go:build !linux

package transport

import (
	"net"

	"github.com/lightq/lightq/log/vfs"
)

// sendfile is not used off Linux: the caller copies through a bounded buffer.
func sendfile(net.Conn, vfs.File, int64, int64) (bool, error) { return false, nil }
