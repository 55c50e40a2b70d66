// Package blast is the blast command (tools/blast is its main), which measures the physical
// limit the broker works within: raw TCP throughput between two processes on loopback, with
// the socket buffer sizes the broker uses (1 MiB SO_SNDBUF and SO_RCVBUF) and writes the size
// of an lqbench producer batch (512 KiB).
//
//	blast [-bytes N] [-write 524288] [-read 65536] [-sndbuf 1048576] [-rcvbuf 1048576] [-json]
//
// The process started by the user listens on 127.0.0.1:0 and receives; it starts a copy of
// itself (blast -send ADDR) as the sender, so the two ends are separate processes as a
// producer and a broker are. The rate is bytes / (first byte received .. EOF), like a
// subscriber's rate in lqbench and nats bench. Over the same interval it measures the CPU
// time of both processes (the receiver's from getrusage, the sender's from its
// /proc/<pid>/stat, read before it is reaped): recv_cpu_s, send_cpu_s and cpu_s_per_gb, their
// sum per 1e9 bytes, the kernel's cost of one loopback hop plus the least user-space work.
// Output: one line of key=value pairs, or with -json one JSON object {"bytes","seconds",
// "mb_per_sec","gbit_per_sec",...,"cpu_s_per_gb"}.
package blast

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/lightq/lightq/tools/internal/proccpu"
)

type result struct {
	Bytes      int64   `json:"bytes"`
	Seconds    float64 `json:"seconds"`
	MBPerSec   float64 `json:"mb_per_sec"` // 1e6 bytes per second, as lqbench's mb_per_sec
	GbitPerSec float64 `json:"gbit_per_sec"`
	WriteSize  int     `json:"write_size"`
	ReadSize   int     `json:"read_size"`
	SndBuf     int     `json:"sndbuf"`
	RcvBuf     int     `json:"rcvbuf"`
	Reads      int64   `json:"reads"`
	// CPU seconds used from the first byte received to EOF, each process, and both per 1e9
	// bytes; 0 where the platform has no /proc.
	RecvCPU  float64 `json:"recv_cpu_s"`
	SendCPU  float64 `json:"send_cpu_s"`
	CPUPerGB float64 `json:"cpu_s_per_gb"`
}

// Main is the whole of the blast command: it parses args (without the program name) and
// returns the exit code: 0 done (or -h), 1 the run failed, 2 bad usage. It starts a copy of
// the running executable as the sender, so the executable must call Main with its own
// arguments, as tools/blast does.
func Main(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("blast", flag.ContinueOnError)
	fs.SetOutput(stderr)
	total := fs.Int64("bytes", 4<<30, "bytes to send")
	writeSize := fs.Int("write", 512<<10, "bytes per write(2) (a producer batch)")
	readSize := fs.Int("read", 64<<10, "bytes per read(2) (the client's read buffer)")
	sndbuf := fs.Int("sndbuf", 1<<20, "SO_SNDBUF of the sender")
	rcvbuf := fs.Int("rcvbuf", 1<<20, "SO_RCVBUF of the receiver")
	timeout := fs.Duration("timeout", 60*time.Second, "give up after this long")
	asJSON := fs.Bool("json", false, "print one JSON object")
	sendTo := fs.String("send", "", "internal: be the sender and connect to this address")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *total <= 0 || *writeSize <= 0 || *readSize <= 0 {
		fmt.Fprintln(stderr, "blast: -bytes, -write and -read must be positive")
		return 2
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, *timeout)
	defer cancelT()
	if *sendTo != "" {
		if err := send(ctx, *sendTo, *total, *writeSize, *sndbuf); err != nil {
			fmt.Fprintln(stderr, "blast sender:", err)
			return 1
		}
		return 0
	}
	r, err := receive(ctx, *total, *writeSize, *readSize, *sndbuf, *rcvbuf, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "blast:", err)
		return 1
	}
	if *asJSON {
		_ = json.NewEncoder(stdout).Encode(r)
	} else {
		fmt.Fprintf(stdout, "bytes=%d seconds=%.3f mb_per_sec=%.1f gbit_per_sec=%.2f write=%d read=%d sndbuf=%d rcvbuf=%d reads=%d recv_cpu_s=%.3f send_cpu_s=%.3f cpu_s_per_gb=%.3f\n",
			r.Bytes, r.Seconds, r.MBPerSec, r.GbitPerSec, r.WriteSize, r.ReadSize, r.SndBuf, r.RcvBuf, r.Reads, r.RecvCPU, r.SendCPU, r.CPUPerGB)
	}
	return 0
}

// receive listens, starts the sender process, and reads until EOF.
func receive(ctx context.Context, total int64, writeSize, readSize, sndbuf, rcvbuf int, stderr io.Writer) (*result, error) {
	lc := net.ListenConfig{}
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	// Set SO_RCVBUF on the listener so accepted sockets inherit it before the handshake
	// fixes the window scale, as a server setting it on its listening socket does.
	if err := setBuf(ln.(*net.TCPListener), syscall.SO_RCVBUF, rcvbuf); err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, self, "-send", ln.Addr().String(), "-bytes", strconv.FormatInt(total, 10),
		"-write", strconv.Itoa(writeSize), "-sndbuf", strconv.Itoa(sndbuf))
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	waited := false
	defer func() {
		if !waited {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	go func() { <-ctx.Done(); ln.Close() }()
	c, err := ln.Accept()
	if err != nil {
		return nil, fmt.Errorf("accept: %w", err)
	}
	defer c.Close()
	go func() { <-ctx.Done(); c.Close() }()
	buf := make([]byte, readSize)
	var n, reads int64
	var first time.Time
	var recv0, send0 float64
	statOK := true // the sender's stat file was readable at both ends
	for {
		k, err := c.Read(buf)
		if k > 0 {
			if n == 0 {
				first = time.Now()
				recv0, send0 = proccpu.Self(), senderCPU(cmd.Process.Pid, &statOK)
			}
			n += int64(k)
			reads++
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read after %d bytes: %w", n, err)
		}
	}
	d := time.Since(first)
	// The sender has closed its end; until Wait reaps it, its stat file holds its times.
	recvCPU, sendCPU := proccpu.Self()-recv0, senderCPU(cmd.Process.Pid, &statOK)-send0
	waited = true
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("sender: %w", err)
	}
	if n != total {
		return nil, fmt.Errorf("received %d bytes, want %d", n, total)
	}
	s := d.Seconds()
	r := &result{Bytes: n, Seconds: s, MBPerSec: float64(n) / s / 1e6, GbitPerSec: float64(n) * 8 / s / 1e9,
		WriteSize: writeSize, ReadSize: readSize, SndBuf: sndbuf, RcvBuf: rcvbuf, Reads: reads}
	if statOK {
		r.RecvCPU, r.SendCPU = recvCPU, sendCPU
		r.CPUPerGB = (recvCPU + sendCPU) / (float64(n) / 1e9)
	}
	return r, nil
}

// senderCPU is the sender's CPU seconds so far; it clears ok when its stat file cannot be
// read.
func senderCPU(pid int, ok *bool) float64 {
	s, err := proccpu.Seconds(pid)
	if err != nil {
		*ok = false
	}
	return s
}

func send(ctx context.Context, addr string, total int64, writeSize, sndbuf int) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	tc := c.(*net.TCPConn)
	if err := tc.SetWriteBuffer(sndbuf); err != nil {
		return err
	}
	go func() { <-ctx.Done(); c.Close() }()
	buf := make([]byte, writeSize)
	for i := range buf {
		buf[i] = byte('a' + i%26)
	}
	for sent := int64(0); sent < total; {
		p := buf
		if rest := total - sent; rest < int64(len(p)) {
			p = p[:rest]
		}
		k, err := tc.Write(p)
		sent += int64(k)
		if err != nil {
			return fmt.Errorf("write after %d bytes: %w", sent, err)
		}
	}
	return tc.CloseWrite()
}

func setBuf(ln *net.TCPListener, opt, size int) error {
	rc, err := ln.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, opt, size)
	}); err != nil {
		return err
	}
	return serr
}
