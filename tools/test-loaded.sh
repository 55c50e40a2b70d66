#!/usr/bin/env bash
# make test-loaded: the CI suite (make test) RUNS times in a row while stress-ng keeps every CPU
# busy, to catch tests that only pass on an idle machine. stress-ng comes from Debian's packages
# and is installed here when missing (root, as on the project's machines).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-3}

if ! command -v stress-ng >/dev/null 2>&1; then
	echo "test-loaded: installing stress-ng"
	apt-get update -qq && apt-get install -y -qq stress-ng >/dev/null
fi

cpus=$(nproc)
stress-ng --cpu "$cpus" --cpu-method matrixprod --timeout 0 --quiet &
load=$!
trap 'kill "$load" 2>/dev/null; wait "$load" 2>/dev/null || true' EXIT

for i in $(seq 1 "$runs"); do
	echo "test-loaded: run $i of $runs, $cpus CPU hogs running"
	start=$(date +%s)
	make test
	echo "test-loaded: run $i passed in $(($(date +%s) - start)) s"
done
echo "test-loaded: $runs runs in a row passed under load"
