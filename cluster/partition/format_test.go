package partition

import (
	"bytes"
	"testing"

	"github.com/lightq/lightq/wire"
)

// TestFormat2: a format-1 batch becomes a valid format-2 batch without a producer, with the
// same records, timestamps and codec.
func TestFormat2(t *testing.T) {
	var c wire.Compressor
	for _, codec := range []wire.Codec{wire.CodecNone, wire.CodecS2} {
		var bb wire.BatchBuilder
		for i := range 5 {
			bb.Append(1_700_000_000_000+int64(i*3), []byte("k"), bytes.Repeat([]byte{'v'}, 40+i), nil)
		}
		b1, err := bb.Finish(codec, &c)
		if err != nil {
			t.Fatal(err)
		}
		h1, _ := wire.PeekBatchHeader(b1)
		b2 := appendFormat2([]byte("prefix"), b1, &h1)[len("prefix"):]
		bt, err := wire.ParseBatch(b2, 1<<20)
		if err != nil {
			t.Fatalf("%v: the converted batch: %v", codec, err)
		}
		switch {
		case bt.Magic != wire.BatchMagic2 || bt.HasProducer() || bt.ProducerEpoch != wire.NoProducer || bt.BaseSequence != wire.NoProducer:
			t.Fatalf("%v: header %+v", codec, bt.BatchHeader)
		case bt.RecordCount != h1.RecordCount || bt.FirstTimestamp != h1.FirstTimestamp || bt.MaxTimestamp != h1.MaxTimestamp ||
			bt.Codec() != codec || bt.RecordsSize != h1.RecordsSize || len(b2) != len(b1)+wire.BatchHeaderSize2-wire.BatchHeaderSize:
			t.Fatalf("%v: header %+v from %+v", codec, bt.BatchHeader, h1)
		case !bytes.Equal(bt.Records, b1[wire.BatchHeaderSize:]):
			t.Fatalf("%v: the records changed", codec)
		}
	}
}
