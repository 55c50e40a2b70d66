#!/usr/bin/env bash
# What LightQ's metrics cost on make compare's cases: runs `tools/compare -brokers lightq` for
# the CASES families ROUNDS times with metrics off and ROUNDS times with metrics on,
# alternated (off, on, off, on, ...). In an "on" run every broker has --http-addr set and its
# /metrics is scraped when the measurement starts and every SCRAPE after (Prometheus's default
# is 15 s; compare's cases last about a second, so the default 200ms is far harsher). Prints, per case and figure, the median and min-max over rounds of each mode, and
# the on/off ratio of the medians; the broker's CPU seconds per measurement (the same messages
# in both modes, so less sensitive to a busy machine than a rate); and the CPU other processes
# used meanwhile (others %: high means a noisy figure).
#
# Settings (environment): ROUNDS=5 SCRAPE=200ms CASES=transient,durable QUIET_IDLE=80 (compare's
# -quiet-idle: wait for an idle CPU before each measurement; 0 on a busy machine)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
SCRAPE=${SCRAPE:-200ms}
CASES=${CASES:-transient,durable}
QUIET=${QUIET_IDLE:-80}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
go build -o "$OUT/compare" ./tools/compare
for i in $(seq "$ROUNDS"); do
  for mode in off on; do
    extra=()
    [ "$mode" = on ] && extra=(-lightq-metrics "$SCRAPE")
    if ! "$OUT/compare" -brokers lightq -cases "$CASES" -rounds 1 -quiet-idle "$QUIET" \
        -raw "$OUT/$mode-$i.json" "${extra[@]}" >/dev/null 2>"$OUT/$mode-$i.log"; then
      cat "$OUT/$mode-$i.log" >&2
      exit 1
    fi
    echo "round $i, metrics $mode: done (load average $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  done
done
python3 - "$OUT" "$ROUNDS" "$SCRAPE" <<'PY'
import glob, json, os, statistics, sys
out, rounds, scrape = sys.argv[1], int(sys.argv[2]), sys.argv[3]
vals = {}  # (case, key, mode) -> [values]
machine = ""
for path in sorted(glob.glob(os.path.join(out, "*.json"))):
    mode = os.path.basename(path).split("-")[0]
    f = json.load(open(path))
    machine = f["machine"]
    for m in f["measurements"]:
        v = m["values"]
        for key in ("sub", "pub", "others_cpu_pct", "scrapes"):
            if key in v:
                vals.setdefault((m["case"], key, mode), []).append(v[key])
        if "server_cpu_pct" in v and "wall_s" in v:
            vals.setdefault((m["case"], "cpu_s", mode), []).append(v["server_cpu_pct"] / 100 * v["wall_s"])
print(f"{machine}; {rounds} rounds per mode, alternated; metrics on = --http-addr and /metrics every {scrape}")
print(f"{'case':26} {'figure':8} {'off: median (min-max)':>32} {'on: median (min-max)':>32} {'on/off':>7} {'others% off/on':>15}")
cases = sorted({c for c, _, _ in vals})
for case in cases:
    for key, label in (("sub", "sub/s"), ("pub", "pub/s")):
        off, on = vals.get((case, key, "off")), vals.get((case, key, "on"))
        if not off or not on:
            continue
        fmt = lambda v: f"{statistics.median(v):12,.0f} ({min(v):,.0f}-{max(v):,.0f})"
        oth = lambda mode: statistics.median(vals.get((case, "others_cpu_pct", mode), [0]))
        print(f"{case:26} {label:8} {fmt(off):>32} {fmt(on):>32} {statistics.median(on)/statistics.median(off):7.3f} {oth('off'):7.0f}/{oth('on'):<7.0f}")
    off, on = vals.get((case, "cpu_s", "off")), vals.get((case, "cpu_s", "on"))
    if off and on:
        fmt = lambda v: f"{statistics.median(v):8.3f} ({min(v):.3f}-{max(v):.3f})"
        print(f"{case:26} {'cpu s':8} {fmt(off):>32} {fmt(on):>32} {statistics.median(on)/statistics.median(off):7.3f}")
    sc = vals.get((case, "scrapes", "on"))
    if sc:
        print(f"{'':26} scrapes per measurement (on): median {statistics.median(sc):.0f}")
PY
