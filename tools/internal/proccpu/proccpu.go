// Package proccpu reads how much CPU time a process has used, for the benchmark harnesses
// (tools/compare, tools/blast) that report CPU seconds per gigabyte.
//
// A live process's figure comes from /proc/<pid>/stat (Linux): utime + stime, fields 14 and
// 15, in clock ticks of USER_HZ, which is 100 on every Linux architecture this project
// builds for, so the resolution is 10 ms. The figure covers all the process's threads, live
// and exited. A process that has exited but not been reaped (a zombie) still has its stat
// file with its final times; once reaped, use its rusage (os.ProcessState) instead.
//
// Its functions are safe for concurrent use.
package proccpu

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// ClockTick is USER_HZ, the unit of utime and stime in /proc/<pid>/stat.
const ClockTick = 100

// ErrStat: the contents are not a /proc/<pid>/stat line.
var ErrStat = errors.New("proccpu: not a /proc/<pid>/stat line")

// ParseStat returns utime + stime in seconds from the contents of /proc/<pid>/stat:
//
//	pid (comm) state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime ...
//
// comm may hold spaces and parentheses, so the fields are counted from the last ')'.
func ParseStat(b []byte) (float64, error) {
	open := bytes.IndexByte(b, '(')
	end := bytes.LastIndexByte(b, ')')
	if open < 1 || end < open {
		return 0, fmt.Errorf("%w: no (comm)", ErrStat)
	}
	if _, err := strconv.ParseUint(string(bytes.TrimSpace(b[:open])), 10, 31); err != nil {
		return 0, fmt.Errorf("%w: pid %q", ErrStat, bytes.TrimSpace(b[:open]))
	}
	f := bytes.Fields(b[end+1:]) // f[0] is the state, field 3
	if len(f) < 13 {
		return 0, fmt.Errorf("%w: %d fields after (comm), want at least 13", ErrStat, len(f))
	}
	u, err1 := strconv.ParseUint(string(f[11]), 10, 63) // utime, field 14
	s, err2 := strconv.ParseUint(string(f[12]), 10, 63) // stime, field 15
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("%w: utime %q, stime %q", ErrStat, f[11], f[12])
	}
	return float64(u+s) / ClockTick, nil
}

// Seconds is the CPU time (user + system) process pid has used so far, from its stat file.
func Seconds(pid int) (float64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	return ParseStat(b)
}

// Self is the CPU time (user + system) of the calling process so far, from getrusage: its
// resolution is a microsecond, finer than a stat file's.
func Self() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return Timeval(ru.Utime) + Timeval(ru.Stime)
}

// Timeval converts a rusage time to seconds.
func Timeval(t syscall.Timeval) float64 {
	return float64(t.Sec) + float64(t.Usec)/1e6
}
