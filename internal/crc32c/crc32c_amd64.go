package crc32c

import "golang.org/x/sys/cpu"

// hasFold reports whether foldAVX512 can run: 512-bit carry-less multiplication
// (VPCLMULQDQ with AVX512F, and AVX512VL for the 128-bit EVEX forms), enabled by the OS (the
// cpu package checks XCR0), and SSE 4.2's CRC32 for the final reduction.
var hasFold = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512VPCLMULQDQ &&
	cpu.X86.HasPCLMULQDQ && cpu.X86.HasSSE42

// fold returns the CRC-32C of p starting from crc, both without the pre- and
// post-inversion (crc32.Update inverts on the way in and out). len(p) must be at least 256
// and a multiple of 64.
func fold(crc uint32, p []byte) uint32 { return foldAVX512(crc, p) }

// foldAVX512 is in crc32c_amd64.s.
//
//go:noescape
func foldAVX512(crc uint32, p []byte) uint32
