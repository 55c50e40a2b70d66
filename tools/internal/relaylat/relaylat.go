// Package relaylat is the relaylat command (tools/relaylat is its main), which measures the
// latency of the least a broker can do on this machine: a paced producer, a relay that only
// copies bytes (written the ordinary Go way, a goroutine per connection), and a consumer, on
// loopback. It is the latency counterpart of tools/blast (the raw TCP throughput limit),
// though not a hard bound: how the relay waits for input matters at the tail, and LightQ's
// gnet broker has measured below it at the p99.
//
//	relaylat [-rate 50000] [-size 100] [-duration 10s | -count N] [-timeout 60s] [-json]
//
// The process started by the user holds the producer and the consumer, as `lqbench e2e` does;
// it starts a copy of itself (relaylat -relay) as the relay, the stand-in for the broker. The
// relay listens on 127.0.0.1:0, prints its address, accepts the producer's connection and
// then the consumer's, and copies bytes from the first to the second with a plain read/write
// loop (64 KiB buffer, TCP_NODELAY as Go sets it; no io.Copy or splice, so it does what a
// user-space broker must at least do).
//
// The producer sends -size byte messages at -rate for -duration (or -count messages), each
// with its own write(2), as LightQ's producer does with linger off; it paces with
// internal/pace, exactly as lqbench --rate. A message starts with its intended send
// time (unix ns, big-endian) and its sequence number (8 bytes each). The consumer reads
// message-size chunks, checks that every message arrives once and in order, and records
// latency in HDR histograms (1 µs..100 s, 3 significant digits) from the intended slot
// (p50_us ...: open loop, the pacer's late wake-ups count) and from the actual send
// (send_p50_us ...: kept in memory by sequence number, as lqbench's sendlog).
//
// Output: one line of key=value pairs, or with -json one JSON object {"messages","rate",
// "msgs_per_sec","p50_us",...,"send_max_us","relay_reads","cpu_s","relay_cpu_s"}.
// msgs_per_sec is messages / (first send .. last receive), as lqbench e2e; cpu_s is the CPU
// time of the producer+consumer process, relay_cpu_s the relay's.
package relaylat

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// maxCount bounds the messages of one run: the send log takes 8 bytes per message.
const maxCount = 1 << 24

// stampSize is the header every message starts with: intended send time, sequence number.
const stampSize = 16

// config is one run.
type config struct {
	rate  int // messages per second
	size  int // bytes per message, >= stampSize
	count int // messages
}

// result is what one run measured. Field names double as the -json keys.
type result struct {
	Messages   int64   `json:"messages"`
	Size       int     `json:"size"`
	Rate       int     `json:"rate"`         // asked for
	Seconds    float64 `json:"seconds"`      // first send .. last receive
	MsgsPerSec float64 `json:"msgs_per_sec"` // achieved: messages / seconds

	// From the intended send time (the slot): open loop, the pacer's lateness included.
	P50Us  float64 `json:"p50_us"`
	P90Us  float64 `json:"p90_us"`
	P99Us  float64 `json:"p99_us"`
	P999Us float64 `json:"p999_us"`
	MaxUs  float64 `json:"max_us"`

	// From the moment the producer actually wrote the message.
	SendP50Us  float64 `json:"send_p50_us"`
	SendP99Us  float64 `json:"send_p99_us"`
	SendP999Us float64 `json:"send_p999_us"`
	SendMaxUs  float64 `json:"send_max_us"`

	RelayReads      int64   `json:"relay_reads"` // read(2) calls that returned data; messages / relay_reads per read
	CPUSeconds      float64 `json:"cpu_s"`       // this process: producer and consumer
	RelayCPUSeconds float64 `json:"relay_cpu_s"` // the relay process
}

// Main is the whole of the relaylat command, so that tests run it in-process: it parses args
// (without the program name) and returns the exit code: 0 done (or -h), 1 the run failed,
// 2 bad usage. It starts a copy of the running executable as the other process, so the
// executable must call Main with its own arguments (tools/relaylat does; a test binary does in
// TestMain).
func Main(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("relaylat", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rate := fs.Int("rate", 50000, "messages per second (open loop)")
	size := fs.Int("size", 100, "bytes per message (at least 16: send time and sequence number)")
	duration := fs.Duration("duration", 10*time.Second, "how long to send (count = rate x duration)")
	count := fs.Int("count", 0, "messages to send (0: rate x duration)")
	timeout := fs.Duration("timeout", 60*time.Second, "give up after this long")
	asJSON := fs.Bool("json", false, "print one JSON object")
	beRelay := fs.Bool("relay", false, "internal: be the relay; print the address, copy the first connection to the second")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	bad := func(msg string) int {
		fmt.Fprintln(stderr, "relaylat:", msg)
		return 2
	}
	switch {
	case fs.NArg() > 0:
		return bad(fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	case *timeout <= 0:
		return bad("-timeout must be positive")
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, *timeout)
	defer cancelT()
	if *beRelay {
		if err := relay(ctx, stdout); err != nil {
			fmt.Fprintln(stderr, "relaylat relay:", err)
			return 1
		}
		return 0
	}
	cfg := config{rate: *rate, size: *size, count: *count}
	switch {
	case *rate <= 0:
		return bad("-rate must be positive")
	case *size < stampSize || *size > 1<<20:
		return bad(fmt.Sprintf("-size must be %d..%d", stampSize, 1<<20))
	case *count < 0 || *count > maxCount:
		return bad(fmt.Sprintf("-count must be 0..%d", maxCount))
	case *count == 0 && *duration <= 0:
		return bad("-duration must be positive (or give -count)")
	}
	if cfg.count == 0 {
		n := float64(*rate) * duration.Seconds()
		if n > maxCount {
			return bad(fmt.Sprintf("-rate x -duration is over %d messages", maxCount))
		}
		cfg.count = max(int(n), 1)
	}
	r, err := measure(ctx, cfg, *timeout, stderr)
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintf(stderr, "relaylat: %v (-timeout %v)\n", context.Cause(ctx), *timeout)
		}
		fmt.Fprintln(stderr, "relaylat:", err)
		return 1
	}
	if *asJSON {
		_ = json.NewEncoder(stdout).Encode(r)
	} else {
		fmt.Fprintf(stdout, "messages=%d size=%d rate=%d msgs_per_sec=%.0f seconds=%.3f p50_us=%.0f p90_us=%.0f p99_us=%.0f p999_us=%.0f max_us=%.0f "+
			"send_p50_us=%.0f send_p99_us=%.0f send_p999_us=%.0f send_max_us=%.0f relay_reads=%d cpu_s=%.2f relay_cpu_s=%.2f\n",
			r.Messages, r.Size, r.Rate, r.MsgsPerSec, r.Seconds, r.P50Us, r.P90Us, r.P99Us, r.P999Us, r.MaxUs,
			r.SendP50Us, r.SendP99Us, r.SendP999Us, r.SendMaxUs, r.RelayReads, r.CPUSeconds, r.RelayCPUSeconds)
	}
	return 0
}
