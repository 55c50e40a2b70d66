#!/usr/bin/env bash
# replperf.sh: one replicated (or single-node) produce measurement, small enough to repeat in
# A/B rounds, the way tools/compare's replicated cases run it: durable topic "bench", one
# partition, fsync=interval=2m, lqbench produce --acks written --batch 512KiB --inflight 16 to
# the partition's leader, the brokers on loopback. Prints one line of key=value figures:
# throughput, seconds, and CPU seconds per GB produced of each process (utime+stime from
# /proc/<pid>/stat just before and just after the producer; lqbench's from its rusage), and
# each broker's minor page faults per MB.
#
#   tools/replperf.sh BINDIR single|repl [SIZE=1024] [BYTES=1000000000]
#
# FSYNC (default interval=2m) and ACKS (default written) change the topic's fsync policy and
# the producer's acks (FSYNC=always ACKS=durable: the acks 2 cases).
# PERF=DIR records `perf record -g` of the leader (the broker, single-node) and follower1 over
# the producer's run into DIR. KEEP=1 keeps the data directory.
set -euo pipefail
BIN=$1 MODE=$2 SIZE=${3:-1024} BYTES=${4:-1000000000}
N=$((BYTES / SIZE))
FSYNC=${FSYNC:-interval=2m} ACKS=${ACKS:-written}
DIR=$(mktemp -d /tmp/replperf.XXXXXX)
export LIGHTQ_ADMIN_PASSWORD=replperf-admin-pw
[[ $MODE == repl ]] && export LIGHTQ_CLUSTER_SECRET=replperf-cluster-secret
BASE=$((10000 + RANDOM % 9000)) # below the ephemeral ports
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	[[ ${KEEP:-0} == 1 ]] || rm -rf "$DIR"
}
trap cleanup EXIT
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; } # clock ticks
minflt() { awk '{print $10}' "/proc/$1/stat"; }

nodes=1
[[ $MODE == repl ]] && nodes=3
peers=""
for i in $(seq 1 $nodes); do peers+="${peers:+,}$i=127.0.0.1:$((BASE + 10 + i))"; done
for i in $(seq 1 $nodes); do
	args=(--addr "127.0.0.1:$((BASE + i))" --data-dir "$DIR/node$i" --log-level warn --hash-params m=64,t=1,p=1
		--http-addr "127.0.0.1:$((BASE + 20 + i))" --pprof-addr "127.0.0.1:$((BASE + 20 + i))")
	[[ $MODE == repl ]] && args+=(--node-id "$i" --cluster-peers "$peers")
	"$BIN/lightq" "${args[@]}" >"$DIR/node$i.log" 2>&1 &
	pids+=($!)
done
for i in $(seq 1 $nodes); do
	for _ in $(seq 1 300); do
		curl -sf "http://127.0.0.1:$((BASE + 20 + i))/readyz" >/dev/null && break
		sleep 0.1
	done
done
topic=(-t bench --kind durable --fsync "$FSYNC" -s "$SIZE" -m "$N")
leader=1
if [[ $MODE == repl ]]; then
	for _ in $(seq 1 100); do
		"$BIN/lqcat" -b "127.0.0.1:$((BASE + 1))" topic create bench --partitions 1 --kind durable --fsync "$FSYNC" \
			-X replication.factor=3 --user lqbench --password lqbench-password >/dev/null 2>&1 && break
		sleep 0.2
	done
	for _ in $(seq 1 150); do
		"$BIN/lqcat" -b "127.0.0.1:$((BASE + 1))" --user lqbench --password lqbench-password -L -t bench >"$DIR/meta.txt" 2>&1 || true
		leader=$(sed -n 's/.*leader:* *\([0-9]\+\).*/\1/p' "$DIR/meta.txt" | head -1)
		[[ -n $leader && $leader != 0 ]] && break
		sleep 0.2
	done
fi
lpid=${pids[$((leader - 1))]}
fol=()
for i in $(seq 1 $nodes); do [[ $i == "$leader" ]] || fol+=("${pids[$((i - 1))]}"); done
perfs=()
if [[ -n ${PERF:-} ]]; then
	mkdir -p "$PERF"
	perf record -g -F 999 -p "$lpid" -o "$PERF/$MODE-leader.data" >/dev/null 2>&1 &
	perfs+=($!)
	if [[ $MODE == repl ]]; then
		perf record -g -F 999 -p "${fol[0]}" -o "$PERF/$MODE-follower.data" >/dev/null 2>&1 &
		perfs+=($!)
	fi
	sleep 0.5
fi
for i in "${!pids[@]}"; do
	kill -0 "${pids[$i]}" 2>/dev/null || { echo "replperf: broker $((i + 1)) exited:" >&2; tail -5 "$DIR/node$((i + 1)).log" >&2; exit 1; }
done
c0=(); f0=(); for p in "${pids[@]}"; do c0+=("$(cpu "$p")"); f0+=("$(minflt "$p")"); done
t0=$(date +%s.%N)
/usr/bin/time -f "%U %S" -o "$DIR/pub.time" "$BIN/lqbench" produce -b "127.0.0.1:$((BASE + leader))" --json -q "${topic[@]}" \
	--acks "$ACKS" --batch 524288 --inflight 16 >"$DIR/pub.json" 2>"$DIR/pub.err"
t1=$(date +%s.%N)
c1=(); f1=(); for p in "${pids[@]}"; do c1+=("$(cpu "$p")"); f1+=("$(minflt "$p")"); done
[[ -n ${HWM:-} ]] && for p in "${pids[@]}"; do grep -E "VmHWM|VmRSS" "/proc/$p/status" | tr '\n' ' ' >&2; echo >&2; done
if ((${#perfs[@]})); then
	kill -INT "${perfs[@]}"
	wait "${perfs[@]}" 2>/dev/null || true
fi
python3 - "$MODE" "$leader" "$t0" "$t1" "$SIZE" "$N" "$DIR/pub.json" "$DIR/pub.time" "${c0[*]}" "${c1[*]}" "${f0[*]}" "${f1[*]}" <<'PY'
import json, sys
mode, leader, t0, t1, size, n, pj, pt, c0, c1, f0, f1 = sys.argv[1:]
leader, size, n = int(leader), int(size), int(n)
wall = float(t1) - float(t0)
r = json.load(open(pj))
gb = n * size / 1e9
c0 = [int(x) for x in c0.split()]; c1 = [int(x) for x in c1.split()]
d = [(b - a) / 100 for a, b in zip(c0, c1)]
u, s = open(pt).read().split()[-2:]
pub = float(u) + float(s)
out = {"mode": mode, "msgs_s": round(r["msgs_per_sec"]), "MB_s": round(r["msgs_per_sec"] * size / 1e6), "sec": round(r["seconds"], 2)}
out["leader_s_gb"] = round(d[leader - 1] / gb, 2)
fs = [d[i] for i in range(len(d)) if i != leader - 1]
for i, f in enumerate(fs):
    out[f"f{i+1}_s_gb"] = round(f / gb, 2)
out["pub_s_gb"] = round(pub / gb, 2)
out["all_s_gb"] = round((sum(d) + pub) / gb, 2)
out["cores"] = round((sum(d) + pub) / wall, 2)
# minor page faults per MB produced: a page touched for the first time costs a fault and a
# cleared page (256 per MiB when every byte lands on fresh memory)
flt = [int(b) - int(a) for a, b in zip(f0.split(), f1.split())]
out["leader_flt_mb"] = round(flt[leader - 1] / (gb * 1e3))
for i, f in enumerate(x for j, x in enumerate(flt) if j != leader - 1):
    out[f"f{i+1}_flt_mb"] = round(f / (gb * 1e3))
print(" ".join(f"{k}={v}" for k, v in out.items()))
PY
