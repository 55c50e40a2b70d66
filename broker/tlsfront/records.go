package tlsfront

// recordHeaderLen is the size of a TLS record header: content type u8, legacy version u16,
// length u16 (RFC 8446 section 5.1; the same in TLS 1.2).
const recordHeaderLen = 5

// recordTracker follows the record boundaries of the raw bytes a client sends, so that the
// front can tell a connection waiting between records (idle, which the broker's idle and auth
// timeouts judge) from one that started a record and did not finish it (a slowloris, bounded
// by the read timeout). crypto/tls cannot be asked which one it is: it reads ahead into its
// own buffer. The tracker only counts bytes; it never rejects input (crypto/tls does that,
// with an alert) and allocates nothing. A zero recordTracker is at a boundary.
type recordTracker struct {
	hdr  [recordHeaderLen]byte
	hdrN int // header bytes seen of the current record, 0..recordHeaderLen
	body int // body bytes of the current record still to come, once its header is whole
}

// feed accounts for b, the next bytes of the stream, and returns how many records ended in it.
func (t *recordTracker) feed(b []byte) (ended int) {
	for len(b) > 0 {
		if t.hdrN < recordHeaderLen {
			n := copy(t.hdr[t.hdrN:], b)
			t.hdrN += n
			b = b[n:]
			if t.hdrN < recordHeaderLen {
				return ended
			}
			t.body = int(t.hdr[3])<<8 | int(t.hdr[4])
		}
		n := min(t.body, len(b))
		t.body -= n
		b = b[n:]
		if t.body == 0 {
			t.hdrN = 0
			ended++
		}
	}
	return ended
}

// midRecord reports whether the stream stopped inside a record: some of its bytes arrived, not
// all of them.
func (t *recordTracker) midRecord() bool { return t.hdrN > 0 }
