#!/usr/bin/env bash
# Everyday work on a real tree through the mount (docs/benchmarks.md, "a
# real tree"): a fresh `govfs dev` cluster with its FUSE mount, then
# cp -a TREE, an fsync of the copy's top directory (the copy counts once
# every queued change is committed), grep -r over it, rm -rf of it; page
# cache dropped before cp -a and grep -r (root only). The same steps on
# a local directory give the baseline of the same run.
#
#   scripts/bench-tree.sh [BINARY] [TREE]    (default bin/govfs, /usr/include)
set -euo pipefail
B=${1:-bin/govfs}
TREE=${2:-/usr/include}
work=$(mktemp -d /tmp/bench-tree.XXXXXX)
D=$work/dev M=$work/mnt L=$work/local
mkdir -p "$M"
drop() { sync; [ "$(id -u)" = 0 ] && echo 3 > /proc/sys/vm/drop_caches || true; }
now() { date +%s.%N; }
secs() { python3 -c "print(f'{$2 - $1:.2f}')"; }

setsid "$B" dev --dir "$D" --mount "$M" > "$work/dev.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 1 60); do mountpoint -q "$M" && break; sleep 1; done
mountpoint -q "$M" || { echo "the dev cluster did not mount; its log:"; cat "$work/dev.log"; exit 1; }

run() { # name dir
	local dir=$2 t0 t1 t2 t3 t4
	drop; t0=$(now); cp -a "$TREE" "$dir/tree"
	python3 -c "import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd)" "$dir/tree"; sync -f "$dir/tree"; t1=$(now)
	drop; t2=$(now); grep -r zzzqqq-not-there "$dir/tree" > /dev/null || true; t3=$(now)
	rm -rf "$dir/tree"; sync -f "$dir"; t4=$(now)
	echo "$1: cp -a + fsync $(secs "$t0" "$t1") s, grep -r $(secs "$t2" "$t3") s, rm -rf $(secs "$t3" "$t4") s"
}
run govfs "$M"
mkdir -p "$L"
run local "$L"
