// Package crc32c computes CRC-32C (Castagnoli), the checksum of every record batch, faster
// than hash/crc32 on CPUs with AVX-512 carry-less multiplication (VPCLMULQDQ).
//
// hash/crc32 computes CRC-32C with the SSE 4.2 CRC32 instruction, three streams at a time:
// about 11 GB/s on the 2-core AMD EPYC VM this broker is measured on, where checking a batch
// was 8-18 % of each process's CPU at 1 KiB messages (the producer seals, the broker and the
// consumer verify every byte). Folding 256 bytes per step with VPCLMULQDQ on 512-bit
// registers (the method of Intel's "Fast CRC Computation for Generic Polynomials Using
// PCLMULQDQ Instruction", the same hash/crc32 uses for IEEE) runs several times faster on
// batches from 1 KiB up; shorter inputs, the tail of a long one and CPUs without the
// instructions use hash/crc32. The result is the same bit for bit (TestMatchesHashCRC32,
// FuzzUpdate).
//
// Every function is safe for concurrent use and allocates nothing.
package crc32c

import "hash/crc32"

var table = crc32.MakeTable(crc32.Castagnoli)

// minFold is the shortest input the folding code takes: below it, hash/crc32 is as fast.
const minFold = 1024

// Update returns the CRC-32C of p appended to the data whose CRC-32C is crc, like
// crc32.Update(crc, crc32.MakeTable(crc32.Castagnoli), p).
func Update(crc uint32, p []byte) uint32 {
	if hasFold && len(p) >= minFold {
		n := len(p) &^ 63
		crc = ^fold(^crc, p[:n])
		p = p[n:]
	}
	return crc32.Update(crc, table, p)
}

// Checksum returns the CRC-32C of p.
func Checksum(p []byte) uint32 { return Update(0, p) }
