package lightq

import (
	"runtime"
	"sync"
)

// maxEventLoops is gnet's limit on event loops.
const maxEventLoops = 256

// baseProcs is GOMAXPROCS as the runtime chose it (the CPUs this process may use, cgroup
// limits included), read once: Main may be called more than once in a process (tests).
var baseProcs = sync.OnceValue(func() int { return runtime.GOMAXPROCS(0) })

// defaultEventLoops is the number of event loops when the configuration says 0: one per CPU
// the process may use. (gnet's own default is runtime.NumCPU, every CPU of the host, which in
// a container limited to fewer CPUs makes loops that cannot all run.)
func defaultEventLoops() int { return min(baseProcs(), maxEventLoops) }

// reserveLoopProcs sets GOMAXPROCS to one P per CPU plus one per gnet event loop, unless the
// user set $GOMAXPROCS. It returns the value and whether it set it.
//
// Why: an event loop waits in epoll_wait(2) as a plain system call, not in Go's netpoller, so
// while it waits the runtime counts its P as busy "in a syscall". With GOMAXPROCS equal to the
// CPU count, every P can end up held by a loop that sleeps in epoll_wait (or by a goroutine
// that took over a retaken P), and a loop whose epoll_wait returns then has no P to run on
// until sysmon retakes one, which can take up to 10 ms. Measured on 2 vCPUs at 50,000 msg/s:
// p99.9 end-to-end latency 11-16 ms with GOMAXPROCS=2, 3.5-4.5 ms with 4. The extra Ps cost
// nothing while idle; the kernel still runs the threads on the real CPUs. (Setting GOMAXPROCS
// stops the runtime from following later changes of the CPU limit; a restart picks them up.)
func reserveLoopProcs(loops int, getenv func(string) string) (int, bool) {
	if getenv("GOMAXPROCS") != "" {
		return runtime.GOMAXPROCS(0), false
	}
	if loops <= 0 {
		loops = defaultEventLoops()
	}
	procs := baseProcs() + min(loops, maxEventLoops)
	runtime.GOMAXPROCS(procs)
	return procs, true
}
