#!/usr/bin/env bash
# Durable-topic catch-up: how fast a consumer reads a partition back from the page cache, and
# what the broker's CPU pays per GB, with sendfile and with the read+write path
# (lightq --fetch-copy) measured side by side on the same data, alternating A B A B.
#
# Settings (environment): MIB=1024 (data written once), SIZE=1024, ROUNDS=3
set -euo pipefail
cd "$(dirname "$0")/.."
MIB=${MIB:-1024}
SIZE=${SIZE:-1024}
ROUNDS=${ROUNDS:-3}
BIN=$(mktemp -d)
DATA=$(mktemp -d -p "${TMPDIR:-/var/tmp}")
PID=
stop() { [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null || true; PID=; }
trap 'stop; rm -rf "$BIN" "$DATA"' EXIT
go build -o "$BIN/" ./cmd/lightq ./cmd/lqbench
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
export LIGHTQ_ADMIN_PASSWORD=bench-admin-password
start() {
  # Cheap password hashing: an argon2 login costs ~0.1 s of CPU, which would count against
  # the transfer in these per-GB figures.
  "$BIN/lightq" --addr "127.0.0.1:$PORT" --data-dir "$DATA" --log-level warn --hash-params m=64,t=1,p=1 "$@" &
  PID=$!
  for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && return; sleep 0.1; done
}
cpu() { awk '{print $14 + $15}' "/proc/$PID/stat"; } # utime + stime, clock ticks
TICK=$(getconf CLK_TCK)
MSGS=$(( MIB * 1048576 / SIZE ))

start
"$BIN/lqbench" produce -b "127.0.0.1:$PORT" -t catchup --kind durable --fsync never -s "$SIZE" -m "$MSGS" -q >/dev/null
stop
echo "machine: $(nproc) cores, $(uname -sr); $MIB MiB of $SIZE-byte messages in one partition"
printf '%-9s %-5s %10s %12s\n' path round GB/s cpu_s/GB
declare -A gbps cpus
for round in $(seq "$ROUNDS"); do
  for path in sendfile copy; do
    if [ "$path" = copy ]; then start --fetch-copy; else start; fi
    # Warm the page cache with one untimed pass, so both paths read from memory.
    [ "$round" = 1 ] && "$BIN/lqbench" consume -b "127.0.0.1:$PORT" -t catchup --kind durable -s "$SIZE" -m "$MSGS" --idle 2s -q >/dev/null
    before=$(cpu)
    out=$("$BIN/lqbench" consume -b "127.0.0.1:$PORT" -t catchup --kind durable -s "$SIZE" -m "$MSGS" --idle 2s --json -q)
    after=$(cpu)
    stop
    read -r secs msgs < <(python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["seconds"], r["messages"])' <<<"$out")
    bytes=$(du -sb "$DATA/topics/catchup/0" | awk '{print $1}')
    g=$(awk -v b="$bytes" -v s="$secs" 'BEGIN { printf "%.2f", b / s / 1e9 }')
    c=$(awk -v a="$after" -v b="$before" -v t="$TICK" -v by="$bytes" 'BEGIN { printf "%.3f", (a - b) / t / (by / 1e9) }')
    printf '%-9s %-5s %10s %12s   (%s messages in %.2f s)\n' "$path" "$round" "$g" "$c" "$msgs" "$secs"
    gbps[$path]+="$g "; cpus[$path]+="$c "
  done
done
med() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for path in sendfile copy; do
  echo "$path median: $(echo "${gbps[$path]}" | med) GB/s, $(echo "${cpus[$path]}" | med) broker CPU s per GB"
done
s=$(echo "${cpus[sendfile]}" | med); c=$(echo "${cpus[copy]}" | med)
awk -v s="$s" -v c="$c" 'BEGIN { printf "sendfile uses %.0f%% less broker CPU per GB than read+write\n", (1 - s / c) * 100 }'
