package wire

import (
	"fmt"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
)

// Compressor compresses and decompresses records sections. Compression is end to end: the
// producer compresses, the broker stores and forwards the batch untouched, the consumer
// decompresses. A Compressor keeps its zstd state between calls, so create one per goroutine
// and reuse it; it is not safe for concurrent use.
type Compressor struct {
	zenc *zstd.Encoder
	zdec *zstd.Decoder
}

// Close releases zstd state.
func (c *Compressor) Close() {
	if c.zdec != nil {
		c.zdec.Close()
	}
	if c.zenc != nil {
		_ = c.zenc.Close()
	}
}

// Compress appends src compressed with codec to dst.
func (c *Compressor) Compress(dst []byte, codec Codec, src []byte) ([]byte, error) {
	switch codec {
	case CodecNone:
		return append(dst, src...), nil
	case CodecS2:
		need := s2.MaxEncodedLen(len(src))
		if need < 0 {
			return nil, fmt.Errorf("%w: %d bytes cannot be s2-compressed", ErrBatchTooLarge, len(src))
		}
		start := len(dst)
		dst = growTo(dst, start+need)
		out := s2.Encode(dst[start:start+need], src)
		return dst[:start+len(out)], nil
	case CodecZstd:
		if c.zenc == nil {
			enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
			if err != nil {
				return nil, err
			}
			c.zenc = enc
		}
		return c.zenc.EncodeAll(src, dst), nil
	}
	return nil, fmt.Errorf("wire: unknown codec %d", codec)
}

// Decompress appends the decompressed records section of bt to dst. The result must be exactly
// bt.RecordsSize bytes, which ParseBatch already bounded by the batch limit, so a compression
// bomb costs at most that much memory.
func (c *Compressor) Decompress(dst []byte, bt *Batch) ([]byte, error) {
	want := int(bt.RecordsSize)
	switch bt.Codec() {
	case CodecNone:
		return append(dst, bt.Records...), nil
	case CodecS2:
		n, err := s2.DecodedLen(bt.Records)
		if err != nil {
			return nil, fmt.Errorf("%w: s2: %v", ErrCorruptBatch, err)
		}
		if n != want {
			return nil, fmt.Errorf("%w: s2 section decodes to %d bytes, header says %d", ErrCorruptBatch, n, want)
		}
		start := len(dst)
		dst = growTo(dst, start+want)
		if _, err := s2.Decode(dst[start:start+want], bt.Records); err != nil {
			return nil, fmt.Errorf("%w: s2: %v", ErrCorruptBatch, err)
		}
		return dst[:start+want], nil
	case CodecZstd:
		if c.zdec == nil {
			dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(64<<20), zstd.WithDecodeAllCapLimit(true))
			if err != nil {
				return nil, err
			}
			c.zdec = dec
		}
		start := len(dst)
		dst = growTo(dst, start+want)
		// The cap limit stops a bomb at want bytes instead of after it.
		out, err := c.zdec.DecodeAll(bt.Records, dst[:start:start+want])
		if err != nil {
			return nil, fmt.Errorf("%w: zstd: %v", ErrCorruptBatch, err)
		}
		if len(out)-start != want {
			return nil, fmt.Errorf("%w: zstd section decodes to %d bytes, header says %d", ErrCorruptBatch, len(out)-start, want)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: unknown codec %d", ErrCorruptBatch, bt.Codec())
}

// growTo returns b with length n, reusing its capacity when it can.
func growTo(b []byte, n int) []byte {
	if cap(b) >= n {
		return b[:n]
	}
	nb := make([]byte, n, n+n/4)
	copy(nb, b)
	return nb
}
