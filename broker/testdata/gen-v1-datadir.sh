#!/bin/sh
# Regenerates broker/testdata/v1-datadir: a data directory written by LightQ at COMMIT (default
# f02ffc2, the last commit whose metadata file is format 1, with one owner user per topic). The
# broker's TestMigrateV1DataDir starts today's broker on a copy of it.
#
# Usage (from anywhere in the repository): broker/testdata/gen-v1-datadir.sh [COMMIT]
#
# The sources of COMMIT are exported with git archive (no checkout or worktree is touched),
# lightq and lqcat are built from them, a broker runs on a free loopback port, and the old lqcat
# creates what the test expects:
#   orders  durable, 2 partitions, user shop (password shop-pw): a b c in partition 0, d e in 1;
#           group billing committed offset 2 in partition 0
#   live    transient, 1 partition, user shop
#   audit   durable, 1 partition, user auditor (password audit-pw): one message, "x"
#   admin   password v1-admin-pw
# Passwords are hashed with cheap argon2 parameters so that the test's logins are fast.
set -eu

commit=${1:-f02ffc2}
root=$(git rev-parse --show-toplevel)
out="$root/broker/testdata/v1-datadir"
work=$(mktemp -d)
pid=
cleanup() {
	if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$work/src" "$work/bin"
git -C "$root" archive "$commit" | tar -x -C "$work/src"
(cd "$work/src" && go build -o "$work/bin/" ./cmd/lightq ./cmd/lqcat)

LIGHTQ_ADMIN_PASSWORD=v1-admin-pw "$work/bin/lightq" --addr 127.0.0.1:0 --data-dir "$work/data" \
	--log-format json --hash-params m=64,t=1,p=1 >"$work/log" 2>&1 &
pid=$!
addr=
for _ in $(seq 100); do
	addr=$(sed -n 's/.*"addr":"\([0-9.:]*\)".*lightq listening.*/\1/p' "$work/log")
	[ -n "$addr" ] && break
	sleep 0.1
done
if [ -z "$addr" ]; then
	echo "the broker did not start:" >&2
	cat "$work/log" >&2
	exit 1
fi

lqcat() { LIGHTQ_BROKER=$addr LIGHTQ_ADMIN_PASSWORD=v1-admin-pw "$work/bin/lqcat" "$@"; }
lqcat topic create orders --kind durable --partitions 2 --user shop --password shop-pw
lqcat topic create live --kind transient --user shop --password shop-pw
lqcat topic create audit --kind durable --user auditor --password audit-pw
printf 'a\nb\nc\n' | lqcat -P -t orders -p 0 --user shop --password shop-pw
printf 'd\ne\n' | lqcat -P -t orders -p 1 --user shop --password shop-pw
printf 'x\n' | lqcat -P -t audit --user auditor --password audit-pw
lqcat -C -t orders -p 0 -G billing -c 2 --user shop --password shop-pw >/dev/null

kill -TERM "$pid"
wait "$pid" || true
pid=
rm -rf "$out"
cp -R "$work/data" "$out"
echo "wrote $out from $commit"
