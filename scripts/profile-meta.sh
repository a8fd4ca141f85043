#!/bin/bash
# profile-meta.sh [BINARY] [K] [OUT]: CPU per metadata command on a fresh
# local cluster of 3 metadata nodes with K ministries.
#
# Starts `govfs dev`, runs `govfs bench meta --ministries K` (64 clients,
# 4,000 creates each) against it, takes an 8 s CPU profile of every node
# 14 s into the create phase, and divides the CPU time by the entries each
# node applied in those 8 s (govfs_raft_entries_applied_total). Throughput
# on a shared 2-core machine swings by 15 % between identical runs; CPU
# per command tells where the time goes, but varies between runs too, so
# compare binaries in alternating runs on a quiet machine.
# Profiles are left in OUT-<port>.prof, merged in OUT.merged.pb.gz.
set -euo pipefail
BIN=${1:-bin/govfs}
K=${2:-1}
OUT=${3:-/tmp/govfs-profile-k$K}
DIR=$(mktemp -d /tmp/govfs-profile-XXXXXX)
# This run's profiles only: the merge below takes every OUT-*.prof, and
# a previous run's (other ports) would be counted too.
rm -f "$OUT"-*.prof
"$BIN" dev --dir "$DIR/cluster" --meta-nodes 3 > "$DIR/dev.out" 2>&1 &
DEV=$!
BENCH=
cleanup() {
	[ -n "$BENCH" ] && kill "$BENCH" 2>/dev/null && wait "$BENCH" 2>/dev/null
	kill -INT "$DEV" 2>/dev/null && wait "$DEV" 2>/dev/null
	rm -rf "$DIR"
}
trap cleanup EXIT
for _ in $(seq 1 60); do grep -q "node 3:" "$DIR/dev.out" && break; sleep 1; done
grep -q "node 3:" "$DIR/dev.out" || { echo "profile-meta: the dev cluster did not start:"; cat "$DIR/dev.out"; exit 1; } >&2
META=$(grep -o "export GOVFS_META=.*" "$DIR/dev.out" | cut -d= -f2)
TLS=$(grep -o "export GOVFS_TLS=.*" "$DIR/dev.out" | cut -d= -f2)
PORTS=$(grep -o "metrics http://127.0.0.1:[0-9]*" "$DIR/dev.out" | head -3 | grep -o "[0-9]*$")
DEBUG=$(grep -o "pprof http://127.0.0.1:[0-9]*" "$DIR/dev.out" | head -3 | grep -o "[0-9]*$")
"$BIN" bench meta --meta "$META" --tls "$TLS" --ministries "$K" --clients 64 --files 4000 --phases create --baseline=false > "$OUT.bench" 2>&1 &
BENCH=$!
sleep 14
applied() {
	local s=0 v
	for p in $PORTS; do
		v=$(curl -s "http://127.0.0.1:$p/metrics" | awk '/^govfs_raft_entries_applied_total/{print $2}')
		s=$(awk -v a="$s" -v b="$v" 'BEGIN{printf "%.0f", a + b}')
	done
	echo "$s"
}
A0=$(applied)
PIDS=()
for p in $DEBUG; do
	curl -s -o "$OUT-$p.prof" "http://127.0.0.1:$p/debug/pprof/profile?seconds=8" &
	PIDS+=($!)
done
wait "${PIDS[@]}"
A1=$(applied)
wait "$BENCH"
BENCH=
grep "ops/s" "$OUT.bench"
go tool pprof -proto "$OUT"-*.prof > "$OUT.merged.pb.gz" 2>/dev/null
CPU=$(go tool pprof -top -nodecount=1 "$OUT.merged.pb.gz" 2>/dev/null | grep -o "Total samples = [0-9.]*m\?s" | awk '{v=$4; if (v ~ /ms$/) {sub("ms","",v); v=v/1000} else sub("s","",v); print v}')
awk -v k="$K" -v a0="$A0" -v a1="$A1" -v cpu="$CPU" 'BEGIN{per=(a1-a0)/3; printf "K=%s: %.0f commands applied per node in 8 s, %.2f s CPU on 3 nodes: %.1f us per command\n", k, per, cpu, cpu*1e6/per}'
