package crc32c

import (
	"hash/crc32"
	"math/bits"
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestMatchesHashCRC32 compares Update with hash/crc32 for every length up to a few
// folding steps past the threshold, at every alignment mod 64, from several starting CRCs.
func TestMatchesHashCRC32(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 4096+64)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	for _, crc := range []uint32{0, 0xffffffff, 0x12345678} {
		for n := 0; n <= 4096; n++ {
			off := n % 64
			p := buf[off : off+n]
			if got, want := Update(crc, p), crc32.Update(crc, table, p); got != want {
				t.Fatalf("crc %#x, %d bytes at offset %d: %#x, hash/crc32 %#x", crc, n, off, got, want)
			}
		}
	}
	big := make([]byte, 1<<20+13)
	for i := range big {
		big[i] = byte(rng.Uint32())
	}
	if got, want := Checksum(big), crc32.Checksum(big, table); got != want {
		t.Fatalf("1 MiB: %#x, hash/crc32 %#x", got, want)
	}
	// Split anywhere, the pieces chain like one call.
	for _, cut := range []int{1, 255, 1024, 5000, 1 << 19} {
		if got, want := Update(Update(0, big[:cut]), big[cut:]), crc32.Checksum(big, table); got != want {
			t.Fatalf("cut at %d: %#x, want %#x", cut, got, want)
		}
	}
}

// TestFoldPatterns checks inputs that stress the carry-less products: all zeros, all ones,
// single bits.
func TestFoldPatterns(t *testing.T) {
	p := make([]byte, 2048)
	check := func(what string) {
		t.Helper()
		if got, want := Checksum(p), crc32.Checksum(p, table); got != want {
			t.Fatalf("%s: %#x, hash/crc32 %#x", what, got, want)
		}
	}
	check("zeros")
	for i := range p {
		p[i] = 0xff
	}
	check("ones")
	for _, bit := range []int{0, 7, 31, 127, 128, 511, 2047, 8191, 2048*8 - 1} {
		clear(p)
		p[bit/8] = 1 << (bit % 8)
		check("bit " + strconv.Itoa(bit))
	}
}

// TestFoldConstants recomputes the constants in crc32c_amd64.s.
func TestFoldConstants(t *testing.T) {
	// x^e mod P, P the normal form of the Castagnoli polynomial.
	xpow := func(e int) uint32 {
		r := uint32(1)
		for range e {
			top := r >> 31
			r <<= 1
			if top == 1 {
				r ^= 0x1EDC6F41
			}
		}
		return r
	}
	k := func(e int) uint64 { return uint64(bits.Reverse32(xpow(e))) << 1 }
	for _, c := range []struct {
		dist   int
		k1, k2 uint64
	}{{256, 0xdcb17aa4, 0xb9e02b86}, {64, 0x740eef02, 0x9e4addf8}, {16, 0xf20c0dfe, 0x14cd00bd6}} {
		if k1, k2 := k(8*c.dist+32), k(8*c.dist-32); k1 != c.k1 || k2 != c.k2 {
			t.Errorf("distance %d: k1 %#x k2 %#x, the assembly has %#x %#x", c.dist, k1, k2, c.k1, c.k2)
		}
	}
}

// FuzzUpdate: Update agrees with hash/crc32 for any input and starting CRC.
func FuzzUpdate(f *testing.F) {
	f.Add(uint32(0), make([]byte, 1024))
	f.Add(uint32(0xdeadbeef), make([]byte, 3000))
	f.Fuzz(func(t *testing.T, crc uint32, p []byte) {
		if got, want := Update(crc, p), crc32.Update(crc, table, p); got != want {
			t.Fatalf("%d bytes from %#x: %#x, hash/crc32 %#x", len(p), crc, got, want)
		}
	})
}

// BenchmarkChecksum compares Checksum with hash/crc32 at a record's and a batch's sizes.
func BenchmarkChecksum(b *testing.B) {
	for _, n := range []int{1024, 16 << 10, 512 << 10} {
		p := make([]byte, n)
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				Checksum(p)
			}
		})
		b.Run(strconv.Itoa(n)+"/hash-crc32", func(b *testing.B) {
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				crc32.Checksum(p, table)
			}
		})
	}
}
