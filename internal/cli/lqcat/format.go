package lqcat

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
)

// unescape turns the escapes of -D, -K and -f into bytes: \n \r \t \0 \\ and \xNN.
// Any other backslash sequence is an error.
func unescape(s string) ([]byte, error) {
	var out []byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		if i+1 == len(s) {
			return nil, fmt.Errorf("%q ends with a lone backslash", s)
		}
		i++
		switch s[i] {
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case '0':
			out = append(out, 0)
		case '\\':
			out = append(out, '\\')
		case 'x':
			if i+3 > len(s) {
				return nil, fmt.Errorf("%q: \\x needs two hex digits", s)
			}
			v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
			if err != nil {
				return nil, fmt.Errorf("%q: \\x needs two hex digits", s)
			}
			out = append(out, byte(v))
			i += 2
		default:
			return nil, fmt.Errorf("%q: unknown escape \\%c (want \\n \\r \\t \\0 \\\\ or \\xNN)", s, s[i])
		}
	}
	return out, nil
}

// A format is a compiled -f string: literal bytes and % fields.
type format []formatPart

type formatPart struct {
	lit   []byte
	field byte // 0 for a literal
}

// formatFields are the fields -f knows, as in kcat.
const formatFields = "tpokKsSTh"

// parseFormat compiles a -f string: %t topic, %p partition, %o offset, %k key, %K key
// size, %s value, %S value size, %T timestamp (unix ms), %h headers (name=value,...), %%
// a percent sign, and the escapes of unescape.
func parseFormat(s string) (format, error) {
	raw, err := unescape(s)
	if err != nil {
		return nil, err
	}
	var f format
	var lit []byte
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c != '%' {
			lit = append(lit, c)
			continue
		}
		if i+1 == len(raw) {
			return nil, fmt.Errorf("format %q ends with a lone %%", s)
		}
		i++
		if raw[i] == '%' {
			lit = append(lit, '%')
			continue
		}
		if bytes.IndexByte([]byte(formatFields), raw[i]) < 0 {
			return nil, fmt.Errorf("format %q: unknown field %%%c (want one of %%t %%p %%o %%k %%K %%s %%S %%T %%h %%%%)", s, raw[i])
		}
		if len(lit) > 0 {
			f = append(f, formatPart{lit: lit})
			lit = nil
		}
		f = append(f, formatPart{field: raw[i]})
	}
	if len(lit) > 0 {
		f = append(f, formatPart{lit: lit})
	}
	return f, nil
}

// render appends r formatted by f to dst.
func (f format) render(dst []byte, topic string, r *client.Received) []byte {
	for _, p := range f {
		switch p.field {
		case 0:
			dst = append(dst, p.lit...)
		case 't':
			dst = append(dst, topic...)
		case 'p':
			dst = strconv.AppendInt(dst, int64(r.Partition), 10)
		case 'o':
			dst = strconv.AppendInt(dst, r.Offset, 10)
		case 'k':
			dst = append(dst, r.Key...)
		case 'K':
			dst = strconv.AppendInt(dst, int64(len(r.Key)), 10)
		case 's':
			dst = append(dst, r.Value...)
		case 'S':
			dst = strconv.AppendInt(dst, int64(len(r.Value)), 10)
		case 'T':
			dst = strconv.AppendInt(dst, r.Timestamp.UnixMilli(), 10)
		case 'h':
			for i, h := range r.Headers {
				if i > 0 {
					dst = append(dst, ',')
				}
				dst = append(dst, h.Name...)
				dst = append(dst, '=')
				dst = append(dst, h.Value...)
			}
		}
	}
	return dst
}

// plainFormat is the output without -f or -J: the value, or (when -K gave a keyDelim) key,
// keyDelim and value, then the -D delimiter.
func plainFormat(delim, keyDelim []byte) format {
	var f format
	if len(keyDelim) > 0 {
		f = append(f, formatPart{field: 'k'}, formatPart{lit: keyDelim})
	}
	return append(f, formatPart{field: 's'}, formatPart{lit: delim})
}

// encodingBase64 marks a JSON field whose string is the base64 (standard, padded) of bytes
// that are not UTF-8.
const encodingBase64 = "base64"

// jsonMessage is the -J form of one message, in output field order.
type jsonMessage struct {
	Topic         string       `json:"topic"`
	Partition     *int32       `json:"partition,omitempty"`
	Offset        *int64       `json:"offset,omitempty"`
	Timestamp     *int64       `json:"timestamp,omitempty"`
	Key           *string      `json:"key"`
	KeyEncoding   string       `json:"key_encoding,omitempty"`
	Value         *string      `json:"value"`
	ValueEncoding string       `json:"value_encoding,omitempty"`
	Headers       []jsonHeader `json:"headers"`
}

type jsonHeader struct {
	Name          string `json:"name"`
	NameEncoding  string `json:"name_encoding,omitempty"`
	Value         string `json:"value"`
	ValueEncoding string `json:"value_encoding,omitempty"`
}

// encodeBytes returns b as a JSON string value and its encoding: the text itself when b is
// UTF-8 (encoding/json keeps every valid UTF-8 string exact), base64 otherwise.
func encodeBytes(b []byte) (string, string) {
	if utf8.Valid(b) {
		return string(b), ""
	}
	return base64.StdEncoding.EncodeToString(b), encodingBase64
}

func decodeBytes(s, enc, what string) ([]byte, error) {
	switch enc {
	case "":
		return []byte(s), nil
	case encodingBase64:
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, fmt.Errorf("%s: bad base64: %w", what, err)
		}
		return b, nil
	}
	return nil, fmt.Errorf("%s_encoding %q: want base64 or nothing", what, enc)
}

// appendJSON appends r as one JSON object (no delimiter). A message without a key has
// "key":null; the protocol does not tell an empty key from none.
func appendJSON(dst []byte, topic string, r *client.Received) []byte {
	part, off, ts := r.Partition, r.Offset, r.Timestamp.UnixMilli()
	m := jsonMessage{Topic: topic, Partition: &part, Offset: &off, Timestamp: &ts, Headers: []jsonHeader{}}
	if len(r.Key) > 0 {
		k, enc := encodeBytes(r.Key)
		m.Key, m.KeyEncoding = &k, enc
	}
	v, enc := encodeBytes(r.Value)
	m.Value, m.ValueEncoding = &v, enc
	for _, h := range r.Headers {
		var jh jsonHeader
		jh.Name, jh.NameEncoding = encodeBytes(h.Name)
		jh.Value, jh.ValueEncoding = encodeBytes(h.Value)
		m.Headers = append(m.Headers, jh)
	}
	var buf bytes.Buffer
	enc2 := json.NewEncoder(&buf)
	enc2.SetEscapeHTML(false)
	if err := enc2.Encode(&m); err != nil {
		// Cannot happen: every field is a string, a number or a slice of them.
		panic(err)
	}
	return append(dst, bytes.TrimSuffix(buf.Bytes(), []byte{'\n'})...)
}

// parsedJSON is one -P -J input line.
type parsedJSON struct {
	msg          client.Message
	hasPartition bool
}

// parseJSONLine decodes one -P -J line: the form -C -J prints. topic and offset are ignored
// (the topic is -t; the broker assigns offsets); partition and timestamp are kept when given.
func parseJSONLine(line []byte) (parsedJSON, error) {
	var m jsonMessage
	var out parsedJSON
	if err := json.Unmarshal(line, &m); err != nil {
		return out, fmt.Errorf("invalid JSON: %w", err)
	}
	if m.Key != nil {
		k, err := decodeBytes(*m.Key, m.KeyEncoding, "key")
		if err != nil {
			return out, err
		}
		out.msg.Key = k
	}
	if m.Value != nil {
		v, err := decodeBytes(*m.Value, m.ValueEncoding, "value")
		if err != nil {
			return out, err
		}
		out.msg.Value = v
	}
	for i, h := range m.Headers {
		name, err := decodeBytes(h.Name, h.NameEncoding, fmt.Sprintf("headers[%d].name", i))
		if err != nil {
			return out, err
		}
		val, err := decodeBytes(h.Value, h.ValueEncoding, fmt.Sprintf("headers[%d].value", i))
		if err != nil {
			return out, err
		}
		out.msg.Headers = append(out.msg.Headers, wire.RecordHeader{Name: name, Value: val})
	}
	if m.Partition != nil {
		if *m.Partition < 0 {
			return out, fmt.Errorf("partition %d", *m.Partition)
		}
		out.msg.Partition, out.msg.HasPartition, out.hasPartition = *m.Partition, true, true
	}
	if m.Timestamp != nil {
		out.msg.Timestamp = time.UnixMilli(*m.Timestamp)
	}
	return out, nil
}
