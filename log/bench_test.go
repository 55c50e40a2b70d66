package log

import (
	"math/rand/v2"
	"testing"
)

func BenchmarkAppend(b *testing.B) {
	for _, size := range []struct {
		name  string
		bytes int
	}{{"4KiB", 4 << 10}, {"64KiB", 64 << 10}} {
		b.Run(size.name, func(b *testing.B) {
			l := mustOpen(b, b.TempDir(), Options{RetentionBytes: 256 << 20})
			defer l.Close()
			batch := makeBatch(rand.New(rand.NewPCG(1, 1)), 1, size.bytes-60, 0)
			b.SetBytes(int64(len(batch)))
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if _, err := l.Append(batch, 1); err != nil {
					b.Fatal(err)
				}
				if i%4096 == 4095 {
					if err := l.EnforceRetention(); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// BenchmarkSync: one 4 KiB append and one fsync per op (the worst case of group commit).
func BenchmarkSync(b *testing.B) {
	l := mustOpen(b, b.TempDir(), Options{})
	defer l.Close()
	batch := makeBatch(rand.New(rand.NewPCG(1, 1)), 1, 4000, 0)
	b.SetBytes(int64(len(batch)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := l.Append(batch, 1); err != nil {
			b.Fatal(err)
		}
		if _, err := l.Sync(); err != nil {
			b.Fatal(err)
		}
	}
}
