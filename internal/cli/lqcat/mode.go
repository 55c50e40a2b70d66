package lqcat

import (
	"context"
	"io"
	"strings"

	"github.com/lightq/lightq/client"
	"github.com/lightq/lightq/wire"
)

// kcatOpts are the flags of the -P, -C and -L modes.
type kcatOpts struct {
	produce, consume, list bool

	topic     string
	partition partFlag
	delim     string
	keyDelim  string
	count     int

	// produce
	key        string
	headers    listFlag
	codec      string
	wholeFiles bool
	acks       string

	// consume
	offset     listFlag
	exitEOF    bool
	group      string
	format     string
	unbuffered bool
	onCorrupt  string
}

func (r *runner) kcatMode(ctx context.Context, args []string) error {
	var o kcatOpts
	fs := newFlagSet("lqcat")
	r.c.register(fs)
	fs.BoolVar(&o.produce, "P", false, "produce")
	fs.BoolVar(&o.consume, "C", false, "consume")
	fs.BoolVar(&o.list, "L", false, "metadata")
	onceVar(fs, &o.topic, "t", "topic")
	fs.Var(&o.partition, "p", "partition")
	o.delim = `\n`
	onceVar(fs, &o.delim, "D", "message delimiter")
	onceVar(fs, &o.keyDelim, "K", "key delimiter")
	onceIntVar(fs, &o.count, new(bool), "c", "message count")
	onceVar(fs, &o.key, "k", "fixed key")
	fs.Var(&o.headers, "H", "header name=value")
	o.codec = "none"
	onceVar(fs, &o.codec, "z", "compression")
	fs.BoolVar(&o.wholeFiles, "l", false, "one message per file")
	o.acks = "written"
	onceVar(fs, &o.acks, "acks", "acks")
	fs.Var(&o.offset, "o", "start offset")
	fs.BoolVar(&o.exitEOF, "e", false, "exit at end")
	onceVar(fs, &o.group, "G", "group")
	onceVar(fs, &o.format, "f", "format")
	fs.BoolVar(&o.unbuffered, "u", false, "unbuffered")
	onceVar(fs, &o.onCorrupt, "on-corrupt", "skip or stop at a batch that cannot be decoded")
	pos, err := r.parse(fs, usage, args)
	if err != nil {
		return err
	}
	if len(args) == 0 {
		io.WriteString(r.stderr, usage)
		return usageErr("one of -P, -C or -L is required")
	}
	if pos, err = o.kcatGroupMode(pos); err != nil {
		return err
	}
	n := 0
	for _, b := range []bool{o.produce, o.consume, o.list} {
		if b {
			n++
		}
	}
	if n != 1 {
		return usageErr("give exactly one of -P (produce), -C (consume) or -L (metadata)")
	}
	if err := r.c.resolve(r.getenv); err != nil {
		return err
	}
	if o.count < 0 {
		return usageErr("-c %d: want a positive count", o.count)
	}
	if len(o.group) > wire.MaxGroupName {
		return usageErr("-G: group name of %d bytes, limit %d", len(o.group), wire.MaxGroupName)
	}
	switch {
	case o.list:
		if len(pos) > 0 {
			return usageErr("-L takes no arguments, got %q", pos[0])
		}
		return r.metadataList(ctx, o.topic, o.group)
	case o.produce:
		p, err := o.produceConfig(pos)
		if err != nil {
			return err
		}
		return r.produce(ctx, p)
	default:
		if len(pos) > 0 {
			return usageErr("-C takes no arguments, got %q", pos[0])
		}
		cc, err := o.consumeConfig(r.c.json)
		if err != nil {
			return err
		}
		return r.consume(ctx, cc)
	}
}

// kcatGroupMode reads kcat's balanced consumer syntax, "-G GROUP TOPIC": with -G and no -P or
// -L, a positional argument is the topic, and -C is implied. lqcat reads one topic at a time.
// It returns the positional arguments left.
func (o *kcatOpts) kcatGroupMode(pos []string) ([]string, error) {
	if o.group == "" || o.produce || o.list || len(pos) == 0 {
		return pos, nil
	}
	if len(pos) > 1 {
		return nil, usageErr("-G %s %s: lqcat consumes one topic at a time; run one lqcat per topic", o.group, strings.Join(pos, " "))
	}
	if o.topic != "" && o.topic != pos[0] {
		return nil, usageErr("-t %q and the topic argument %q differ: give one", o.topic, pos[0])
	}
	o.topic, o.consume = pos[0], true
	return nil, nil
}

func (o *kcatOpts) needTopic() error {
	if o.topic == "" {
		return usageErr("-t TOPIC is required")
	}
	if err := wire.ValidTopicName(o.topic); err != nil {
		return usageErr("-t: %v", err)
	}
	return nil
}

// produceConfig checks the -P flags.
func (o *kcatOpts) produceConfig(files []string) (produceConfig, error) {
	p := produceConfig{topic: o.topic, files: files, wholeFiles: o.wholeFiles, count: o.count, partition: o.partition}
	if err := o.needTopic(); err != nil {
		return p, err
	}
	if o.consumeOnly() {
		return p, usageErr("-o, -e, -G, -f, -u and --on-corrupt are consumer flags: use them with -C")
	}
	var err error
	if p.delim, err = unescape(o.delim); err != nil {
		return p, usageErr("-D: %v", err)
	}
	if len(p.delim) == 0 {
		return p, usageErr("-D: the delimiter is empty")
	}
	if p.keyDelim, err = unescape(o.keyDelim); err != nil {
		return p, usageErr("-K: %v", err)
	}
	if o.key != "" {
		p.key = []byte(o.key)
	}
	for _, h := range o.headers {
		name, val, ok := splitHeader(h)
		if !ok {
			return p, usageErr("-H %q: want name=value", h)
		}
		p.headers = append(p.headers, wire.RecordHeader{Name: []byte(name), Value: []byte(val)})
	}
	codec := o.codec
	if codec == "snappy" {
		codec = "s2"
	}
	if p.codec, err = wire.ParseCodec(codec); err != nil {
		return p, usageErr("-z: %v", err)
	}
	switch o.acks {
	case "none":
		p.acks = client.AckNone
	case "written", "":
		p.acks = client.AckWritten
	case "durable":
		p.acks = client.AckDurable
	default:
		return p, usageErr("--acks %q: want none, written or durable", o.acks)
	}
	if p.wholeFiles && len(files) == 0 {
		return p, usageErr("-l sends each FILE as one message: name the files")
	}
	return p, nil
}

func (o *kcatOpts) consumeOnly() bool {
	return len(o.offset) > 0 || o.exitEOF || o.group != "" || o.format != "" || o.unbuffered || o.onCorrupt != ""
}

func splitHeader(h string) (string, string, bool) {
	for i := 0; i < len(h); i++ {
		if h[i] == '=' {
			return h[:i], h[i+1:], i > 0
		}
	}
	return "", "", false
}

// consumeConfig checks the -C flags.
func (o *kcatOpts) consumeConfig(jsonOut bool) (consumeConfig, error) {
	cc := consumeConfig{topic: o.topic, partition: o.partition, count: o.count, exitEOF: o.exitEOF, group: o.group, unbuffered: o.unbuffered}
	if err := o.needTopic(); err != nil {
		return cc, err
	}
	if o.key != "" || len(o.headers) > 0 || o.wholeFiles || o.codec != "none" || o.acks != "written" {
		return cc, usageErr("-k, -H, -l, -z and --acks are producer flags: use them with -P")
	}
	if o.partition.set && o.partition.v < 0 {
		return cc, usageErr("-p %d: give a partition, or leave -p out for all", o.partition.v)
	}
	switch o.onCorrupt {
	case "skip", "":
	case "stop":
		cc.stopOnCorrupt = true
	default:
		return cc, usageErr("--on-corrupt %q: want skip or stop", o.onCorrupt)
	}
	var err error
	if cc.start, err = parseOffset(o.offset); err != nil {
		return cc, usageErr("-o: %v", err)
	}
	if cc.start.stored && o.group == "" {
		return cc, usageErr("-o stored starts at the group's committed offsets: give the group with -G")
	}
	delim, err := unescape(o.delim)
	if err != nil {
		return cc, usageErr("-D: %v", err)
	}
	keyDelim, err := unescape(o.keyDelim)
	if err != nil {
		return cc, usageErr("-K: %v", err)
	}
	switch {
	case o.format != "" && jsonOut:
		return cc, usageErr("-f and -J are two output formats: give one")
	case o.format != "":
		if cc.format, err = parseFormat(o.format); err != nil {
			return cc, usageErr("-f: %v", err)
		}
	case jsonOut:
		cc.json, cc.delim = true, delim
	default:
		cc.format = plainFormat(delim, keyDelim) // keyDelim is empty only without -K
	}
	return cc, nil
}
