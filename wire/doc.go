// Package wire holds LightQ's binary protocol: the frame header, every request and response
// body, the error code table and the record batch, which is both the unit of transfer and the
// unit of storage. PROTOCOL.md is the contract; this package is its only implementation, and
// protocol_doc_test.go checks every example in PROTOCOL.md against it.
//
// Conventions, the same everywhere:
//   - All integers are big-endian. Lengths inside record batches are unsigned varints
//     (minimal encoding only) so that small records stay small.
//   - Encoders append to the caller's slice and return it (AppendX), so a connection reuses one
//     buffer and encodes without allocating.
//   - Decoders read from a []byte through Reader, whose first error is sticky and checked once
//     at the end. Every length is checked against the bytes that remain (and against a limit)
//     before anything is allocated. Decoded byte slices alias the input: copy what you keep.
//
// Concurrency: all functions are pure; a Reader or BatchBuilder belongs to one goroutine.
//
// Example, encoding a PING with correlation id 7 and decoding it back:
//
//	frame := wire.AppendFrame(nil, wire.OpPing, 0, 7, nil)
//	n, err := wire.FrameSize(frame, wire.DefaultLimits().MaxFrame)
//	// n == len(frame) == 16, err == nil
//	h, body, _ := wire.ParseFrame(frame[:n])
//	// h.Op == wire.OpPing, h.Corr == 7, len(body) == 0
package wire
