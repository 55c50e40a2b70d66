#include "textflag.h"

// Fold constants for the reflected CRC-32C polynomial 0x82F63B78. A 128-bit lane holding the
// 16 bytes at distance D bytes before data it is to be added to is multiplied, low quadword
// by k1 and high quadword by k2, where k1 = reflect32(x^(8D+32) mod P) << 1 and
// k2 = reflect32(x^(8D-32) mod P) << 1 (TestFoldConstants recomputes them).
DATA k256<>+0(SB)/8, $0xdcb17aa4
DATA k256<>+8(SB)/8, $0xb9e02b86
GLOBL k256<>(SB), RODATA, $16
DATA k64<>+0(SB)/8, $0x740eef02
DATA k64<>+8(SB)/8, $0x9e4addf8
GLOBL k64<>(SB), RODATA, $16
DATA k16<>+0(SB)/8, $0xf20c0dfe
DATA k16<>+8(SB)/8, $0x14cd00bd6
GLOBL k16<>(SB), RODATA, $16

// func foldAVX512(crc uint32, p []byte) uint32
//
// len(p) >= 256 and a multiple of 64. Four 512-bit accumulators (Z1-Z4) take 256 bytes per
// step; they are folded into one (Z4), which takes the rest 64 bytes at a time; its four
// lanes are folded into one, whose 16 bytes the CRC32 instruction reduces to the checksum.
TEXT ·foldAVX512(SB), NOSPLIT, $0-36
	MOVQ p_len+16(FP), CX
	MOVQ p_base+8(FP), SI
	MOVL crc+0(FP), AX

	// The first 256 bytes, with the initial CRC added to the first four.
	VMOVDQU64 0(SI), Z1
	VMOVDQU64 64(SI), Z2
	VMOVDQU64 128(SI), Z3
	VMOVDQU64 192(SI), Z4
	VPXORQ    Z10, Z10, Z10
	VMOVD     AX, X10
	VPXORQ    Z10, Z1, Z1
	ADDQ      $256, SI
	SUBQ      $256, CX

	VBROADCASTI32X4 k256<>(SB), Z0
	CMPQ CX, $256
	JB   fold4

loop256:
	VMOVDQU64  0(SI), Z11
	VMOVDQU64  64(SI), Z12
	VMOVDQU64  128(SI), Z13
	VMOVDQU64  192(SI), Z14
	VPCLMULQDQ $0x11, Z0, Z1, Z5
	VPCLMULQDQ $0x00, Z0, Z1, Z1
	VPCLMULQDQ $0x11, Z0, Z2, Z6
	VPCLMULQDQ $0x00, Z0, Z2, Z2
	VPCLMULQDQ $0x11, Z0, Z3, Z7
	VPCLMULQDQ $0x00, Z0, Z3, Z3
	VPCLMULQDQ $0x11, Z0, Z4, Z8
	VPCLMULQDQ $0x00, Z0, Z4, Z4
	VPTERNLOGD $0x96, Z11, Z5, Z1
	VPTERNLOGD $0x96, Z12, Z6, Z2
	VPTERNLOGD $0x96, Z13, Z7, Z3
	VPTERNLOGD $0x96, Z14, Z8, Z4
	ADDQ       $256, SI
	SUBQ       $256, CX
	CMPQ       CX, $256
	JAE        loop256

fold4:
	// Z2 += Z1 moved 64 bytes on, then Z3 += Z2, Z4 += Z3.
	VBROADCASTI32X4 k64<>(SB), Z0
	VPCLMULQDQ      $0x11, Z0, Z1, Z5
	VPCLMULQDQ      $0x00, Z0, Z1, Z1
	VPTERNLOGD      $0x96, Z5, Z1, Z2
	VPCLMULQDQ      $0x11, Z0, Z2, Z5
	VPCLMULQDQ      $0x00, Z0, Z2, Z2
	VPTERNLOGD      $0x96, Z5, Z2, Z3
	VPCLMULQDQ      $0x11, Z0, Z3, Z5
	VPCLMULQDQ      $0x00, Z0, Z3, Z3
	VPTERNLOGD      $0x96, Z5, Z3, Z4
	CMPQ            CX, $64
	JB              lanes

loop64:
	VMOVDQU64  0(SI), Z11
	VPCLMULQDQ $0x11, Z0, Z4, Z5
	VPCLMULQDQ $0x00, Z0, Z4, Z4
	VPTERNLOGD $0x96, Z11, Z5, Z4
	ADDQ       $64, SI
	SUBQ       $64, CX
	CMPQ       CX, $64
	JAE        loop64

lanes:
	// The four lanes of Z4, oldest first: X4, X5, X6, X7; fold each into the next.
	VEXTRACTI32X4 $1, Z4, X5
	VEXTRACTI32X4 $2, Z4, X6
	VEXTRACTI32X4 $3, Z4, X7
	VMOVDQU64     k16<>(SB), X0
	VPCLMULQDQ    $0x11, X0, X4, X8
	VPCLMULQDQ    $0x00, X0, X4, X4
	VPTERNLOGD    $0x96, X5, X8, X4
	VPCLMULQDQ    $0x11, X0, X4, X8
	VPCLMULQDQ    $0x00, X0, X4, X4
	VPTERNLOGD    $0x96, X6, X8, X4
	VPCLMULQDQ    $0x11, X0, X4, X8
	VPCLMULQDQ    $0x00, X0, X4, X4
	VPTERNLOGD    $0x96, X7, X8, X4

	// The CRC of those 16 bytes from 0 is the CRC of all of p from crc.
	VMOVQ   X4, AX
	VPEXTRQ $1, X4, BX
	VZEROUPPER
	XORL    DX, DX
	CRC32Q  AX, DX
	CRC32Q  BX, DX
	MOVL    DX, ret+32(FP)
	RET
