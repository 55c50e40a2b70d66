#!/usr/bin/env bash
# End-to-end throughput on loopback with the broker and the clients as separate processes:
# builds lightq and lqbench, starts a broker on a free 127.0.0.1 port with a temp data dir,
# runs `lqbench e2e` (1 producer -> broker -> 1 consumer) for each kind and message size
# ROUNDS times, prints one line per run and the median per case, and stops the broker.
# Durable topics use fsync=always (acknowledged after fsync, group commit).
#
# Settings (environment): KINDS="transient" SIZES="100 1024" ROUNDS=3 MSGS=<per size>
#   `make bench` runs the original LightQ's matrix: KINDS="transient durable"
#   SIZES="100 256 512 1024" ROUNDS=1.
set -euo pipefail
cd "$(dirname "$0")/.."
KINDS=${KINDS:-transient}
SIZES=${SIZES:-"100 1024"}
ROUNDS=${ROUNDS:-3}
BIN=$(mktemp -d)
DATA=$(mktemp -d)
trap 'kill "${PID:-}" 2>/dev/null || true; wait "${PID:-}" 2>/dev/null || true; rm -rf "$BIN" "$DATA"' EXIT
go build -o "$BIN/" ./cmd/lightq ./cmd/lqbench
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo 17450)
export LIGHTQ_ADMIN_PASSWORD=bench-admin-password
"$BIN/lightq" --addr "127.0.0.1:$PORT" --data-dir "$DATA" --log-level warn --hash-params m=64,t=1,p=1 &
PID=$!
for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break; sleep 0.1; done
echo "machine: $(nproc) cores, $(uname -sr); broker pid $PID on 127.0.0.1:$PORT"
printf '%-9s %-6s %-5s %12s %10s %9s %9s %9s %8s\n' kind size round msgs/s MB/s p50_us p99_us p999_us dropped
for kind in $KINDS; do
for size in $SIZES; do
  msgs=${MSGS:-$(( size <= 128 ? 2000000 : size <= 512 ? 1000000 : 500000 ))}
  rates=()
  for round in $(seq "$ROUNDS"); do
    extra=(); [ "$kind" = durable ] && extra=(--kind durable --fsync always)
    out=$("$BIN/lqbench" e2e -b "127.0.0.1:$PORT" -t "e2e-$kind-$size-$round" -s "$size" -m "$msgs" "${extra[@]}" --json -q)
    read -r rate mb p50 p99 p999 dropped < <(python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["msgs_per_sec"], r["mb_per_sec"], r["p50_us"], r["p99_us"], r["p999_us"], r["dropped"])' <<<"$out")
    printf '%-9s %-6s %-5s %12.0f %10.1f %9.0f %9.0f %9.0f %8s\n' "$kind" "$size" "$round" "$rate" "$mb" "$p50" "$p99" "$p999" "$dropped"
    rates+=("$rate")
  done
  median=$(printf '%s\n' "${rates[@]}" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  awk -v k="$kind" -v s="$size" -v m="$median" 'BEGIN { printf "%-9s %-6s median %11.0f msg/s (%.1f MB/s of payload)\n", k, s, m, m * s / 1e6 }'
done
done
