package transport

import (
	"fmt"
	"testing"
)

// BenchmarkDecodeFrame: a follower's side of a frame of 8 appends of 10 record batches each,
// at two batch sizes; allocs/op counts per frame.
func BenchmarkDecodeFrame(b *testing.B) {
	for _, size := range []int{10 << 10, 100 << 10} {
		b.Run(fmt.Sprintf("batch=%dKiB", size>>10), func(b *testing.B) {
			var envs []Envelope
			for range 8 {
				data := make([][]byte, 10)
				for i := range data {
					data[i] = make([]byte, size)
				}
				envs = append(envs, Envelope{Group: 1, Msg: appendMsg(2, 10, data...)})
			}
			frame, err := appendFrame(nil, envs)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(frame)))
			b.ReportAllocs()
			for b.Loop() {
				if err := decodeFrame(frame, func(Envelope) {}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAppendFrame: a leader's side, the same frames encoded into a reused buffer.
func BenchmarkAppendFrame(b *testing.B) {
	for _, size := range []int{10 << 10, 100 << 10} {
		b.Run(fmt.Sprintf("batch=%dKiB", size>>10), func(b *testing.B) {
			var envs []Envelope
			for range 8 {
				data := make([][]byte, 10)
				for i := range data {
					data[i] = make([]byte, size)
				}
				envs = append(envs, Envelope{Group: 1, Msg: appendMsg(2, 10, data...)})
			}
			buf, err := appendFrame(nil, envs)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			for b.Loop() {
				if buf, err = appendFrame(buf[:0], envs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
