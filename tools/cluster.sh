#!/usr/bin/env bash
# make cluster: three LightQ brokers on loopback in the foreground, each with its own data
# directory (data/cluster/1, 2, 3), members of one cluster (PROTOCOL.md section 16). Prints
# how to reach them; their logs follow, each line prefixed with its node id (and kept in
# data/cluster/N/lightq.log). Ctrl-C stops all three (SIGTERM: each drains and syncs).
#
# Ports (CLUSTER_PORT, default 7451): clients CLUSTER_PORT+0..2, the cluster ports (brokers
# only) +10..12, the operations listeners (/metrics, /readyz) +20..22, all on 127.0.0.1.
# The cluster secret and the admin password are made once and kept beside the data
# (data/cluster/secret, data/cluster/admin-password, mode 0600), unless LIGHTQ_CLUSTER_SECRET
# or LIGHTQ_ADMIN_PASSWORD is set. BIN (default bin/lightq) is the broker binary.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${BIN:-bin/lightq}
PORT=${CLUSTER_PORT:-7451}
DATA=${CLUSTER_DATA:-data/cluster}
NODES=(1 2 3)

[[ -x $BIN ]] || { echo "cluster: $BIN is missing: run make build (make cluster does)" >&2; exit 1; }
mkdir -p "$DATA"
umask 077

# secret FILE: the file's content, made from 24 random bytes when it does not exist.
secret() {
	[[ -s $1 ]] || head -c 24 /dev/urandom | base64 | tr -d '/+=\n' >"$1"
	cat "$1"
}
export LIGHTQ_CLUSTER_SECRET=${LIGHTQ_CLUSTER_SECRET:-$(secret "$DATA/secret")}
export LIGHTQ_ADMIN_PASSWORD=${LIGHTQ_ADMIN_PASSWORD:-$(secret "$DATA/admin-password")}
umask 022

client_addr() { echo "127.0.0.1:$((PORT + $1 - 1))"; }
cluster_addr() { echo "127.0.0.1:$((PORT + 9 + $1))"; }
http_port() { echo $((PORT + 19 + $1)); }

peers=""
for n in "${NODES[@]}"; do
	peers+="${peers:+,}$n=$(cluster_addr "$n")"
done

pids=()
stop() {
	trap - INT TERM
	echo "cluster: stopping the brokers" >&2
	for pid in "${pids[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	wait "${pids[@]}" 2>/dev/null || true
	exit "${1:-0}"
}
trap 'stop 0' INT TERM

for n in "${NODES[@]}"; do
	dir="$DATA/$n"
	mkdir -p "$dir"
	"$BIN" --addr "$(client_addr "$n")" --data-dir "$dir" --node-id "$n" --cluster-peers "$peers" \
		--http-addr "127.0.0.1:$(http_port "$n")" --log-format console \
		> >(trap '' INT; tee -a "$dir/lightq.log" | sed -u "s/^/[$n] /") 2>&1 & # the log outlives Ctrl-C
	pids+=($!)
done

# ready N: node N's /readyz answers 200 (bash's /dev/tcp: no curl needed).
ready() {
	local status
	{ exec 3<>"/dev/tcp/127.0.0.1/$(http_port "$1")"; } 2>/dev/null || return 1
	printf 'GET /readyz HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3
	IFS= read -r -t 2 status <&3 || status=""
	exec 3>&- 3<&-
	[[ $status == *" 200 "* ]]
}

deadline=$((SECONDS + 60))
for i in "${!NODES[@]}"; do
	n=${NODES[$i]}
	until ready "$n"; do
		if ! kill -0 "${pids[$i]}" 2>/dev/null; then
			if grep -q "not supported by this build yet" "$DATA/$n/lightq.log" 2>/dev/null; then
				echo "cluster: this build of lightq refuses cluster settings (replication is not wired in yet)" >&2
			else
				echo "cluster: node $n exited while starting; see $DATA/$n/lightq.log" >&2
			fi
			stop 1
		fi
		if ((SECONDS > deadline)); then
			echo "cluster: node $n not ready after 60 s; see $DATA/$n/lightq.log" >&2
			stop 1
		fi
		sleep 0.1
	done
done

cat <<EOF

LightQ cluster: three brokers on loopback, data in $DATA/{1,2,3}
EOF
for n in "${NODES[@]}"; do
	printf '  node %s: clients %s   cluster port %s   http://127.0.0.1:%s/metrics\n' \
		"$n" "$(client_addr "$n")" "$(cluster_addr "$n")" "$(http_port "$n")"
done
cat <<EOF
  admin password: $LIGHTQ_ADMIN_PASSWORD   (user admin; kept in $DATA/admin-password)

In another terminal:
  export PATH="\$PWD/bin:\$PATH" LIGHTQ_ADMIN_PASSWORD=$LIGHTQ_ADMIN_PASSWORD LIGHTQ_BROKER=$(client_addr 1)
  lqcat topic create orders --kind durable --partitions 3 -X replication.factor=3 -X fsync=always
  lqcat -L -t orders                                  # each partition's leader and replicas
  seq 1 10 | lqcat -P -t orders
  lqcat -C -t orders -o beginning -e
  lqcat -b $(client_addr 2) -C -t orders -o beginning -e   # any broker: clients follow the leaders

Ctrl-C stops all three.

EOF

# Until Ctrl-C, or until a broker exits by itself (then the others are stopped too).
set +e
wait -n "${pids[@]}"
code=$?
echo "cluster: a broker exited (status $code)" >&2
stop "$code"
