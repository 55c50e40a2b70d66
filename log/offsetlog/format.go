package offsetlog

import (
	"encoding/binary"
	"hash/crc32"
)

// The on-disk format (see the package doc). NEVER CHANGE these values: they are in every
// existing offsets log.
const (
	fileName   = "offsets.log" // NEVER CHANGE
	fileMagic  = "LQOL"        // NEVER CHANGE
	fileFormat = 1             // NEVER CHANGE the meaning of format 1
	headerSize = 8             // magic + format u32; NEVER CHANGE

	frameHeaderSize = 8 // crc32c u32 + length u32; NEVER CHANGE
	// MaxFrameBody is the largest records section a frame may have. A length above it is
	// damage, never a frame. NEVER LOWER it (existing files may hold frames this large).
	MaxFrameBody = 1 << 20

	recordCommit     = 1  // record type: a commit; 0 is invalid so zeros never decode. NEVER CHANGE
	recordFixedSize  = 14 // type u8 + group length u8 + partition u32 + offset i64; NEVER CHANGE
	MaxGroupName     = 255
	maxRecordSize    = recordFixedSize + MaxGroupName
	compactChunkBody = 64 << 10 // records per frame when a snapshot is written
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Entry is one committed offset.
type Entry struct {
	Group     string
	Partition uint32
	Offset    int64
}

// recordSize is the encoded size of a commit record for group.
func recordSize(group string) int { return recordFixedSize + len(group) }

// appendRecord appends a commit record. The caller has checked the group's length and the
// offset's sign.
func appendRecord(dst []byte, group string, partition uint32, offset int64) []byte {
	dst = append(dst, recordCommit, byte(len(group)))
	dst = binary.BigEndian.AppendUint32(dst, partition)
	dst = binary.BigEndian.AppendUint64(dst, uint64(offset))
	return append(dst, group...)
}

// startFrame appends room for a frame header; sealFrame fills it in once the records after
// it are appended. frame is the slice from the header on.
func startFrame(dst []byte) []byte { return append(dst, make([]byte, frameHeaderSize)...) }

func sealFrame(frame []byte) {
	binary.BigEndian.PutUint32(frame[4:8], uint32(len(frame)-frameHeaderSize))
	binary.BigEndian.PutUint32(frame[0:4], crc32.Checksum(frame[4:], castagnoli))
}

// appendHeader appends the file header.
func appendHeader(dst []byte) []byte {
	dst = append(dst, fileMagic...)
	return binary.BigEndian.AppendUint32(dst, fileFormat)
}

// validHeader reports whether b starts with the file header of format 1.
func validHeader(b []byte) bool {
	return len(b) >= headerSize && string(b[:4]) == fileMagic && binary.BigEndian.Uint32(b[4:8]) == fileFormat
}

// frameAt checks the frame starting at b[0]: its length is within MaxFrameBody and b, its
// CRC matches and its records section is a whole number of valid records. It returns the
// frame's total size, or 0 when b does not start with a valid frame. It never allocates.
func frameAt(b []byte) int {
	if len(b) < frameHeaderSize {
		return 0
	}
	n := binary.BigEndian.Uint32(b[4:8])
	if n == 0 || n > MaxFrameBody || uint64(n) > uint64(len(b)-frameHeaderSize) {
		return 0
	}
	end := frameHeaderSize + int(n)
	if crc32.Checksum(b[4:end], castagnoli) != binary.BigEndian.Uint32(b[0:4]) {
		return 0
	}
	if !eachRecord(b[frameHeaderSize:end], func([]byte, uint32, int64) {}) {
		return 0
	}
	return end
}

// eachRecord calls fn for every record of a frame's records section, in order, and reports
// whether the section is a whole number of valid records. group aliases recs: fn copies it
// to keep it.
func eachRecord(recs []byte, fn func(group []byte, partition uint32, offset int64)) bool {
	for len(recs) > 0 {
		if len(recs) < recordFixedSize || recs[0] != recordCommit {
			return false
		}
		glen := int(recs[1])
		if glen == 0 || len(recs) < recordFixedSize+glen {
			return false
		}
		off := int64(binary.BigEndian.Uint64(recs[6:14]))
		if off < 0 {
			return false
		}
		fn(recs[recordFixedSize:recordFixedSize+glen], binary.BigEndian.Uint32(recs[2:6]), off)
		recs = recs[recordFixedSize+glen:]
	}
	return true
}

// decodeFrames walks the frames of b (a file without its header) and calls fn for every
// record of every valid frame, in order. It returns the length of the valid prefix: the
// position of the first byte that does not start a valid frame, or len(b).
func decodeFrames(b []byte, fn func(group []byte, partition uint32, offset int64)) int {
	p := 0
	for p < len(b) {
		n := frameAt(b[p:])
		if n == 0 {
			return p
		}
		eachRecord(b[p+frameHeaderSize:p+n], fn)
		p += n
	}
	return p
}

// validFrameAfter reports whether a valid frame starts anywhere in b after its first byte:
// then damage at b[0] is followed by data that was once written whole, so it is corruption
// in the middle rather than a torn tail.
func validFrameAfter(b []byte) bool {
	for i := 1; i+frameHeaderSize <= len(b); i++ {
		if frameAt(b[i:]) > 0 {
			return true
		}
	}
	return false
}
