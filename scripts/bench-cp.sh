#!/usr/bin/env bash
# cp -a of many small chunk files through the mount (docs/benchmarks.md,
# "a new file's bytes queue behind its create"): a fresh `govfs dev`
# cluster with its FUSE mount, a warm-up file, then cp -a of a tree of
# FILES random files of SIZE bytes and an fsync of the copy's top
# directory (the copy counts once every queued change is committed);
# diff -r and rsync -a -n -i must find nothing. The same copy into a
# local directory (then fsync and sync) is the baseline of the same run.
#
#   scripts/bench-cp.sh [BINARY] [FILES] [SIZE]   (default bin/govfs, 300, 10240)
set -euo pipefail
B=${1:-bin/govfs}
FILES=${2:-300}
SIZE=${3:-10240}
work=$(mktemp -d /tmp/bench-cp.XXXXXX)
mkdir -p "$work/mnt" "$work/src" "$work/local"
for i in $(seq 1 "$FILES"); do head -c "$SIZE" /dev/urandom > "$work/src/f$i"; done
setsid "$B" dev --dir "$work/dev" --mount "$work/mnt" > "$work/dev.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 1 60); do mountpoint -q "$work/mnt" && break; sleep 1; done
mountpoint -q "$work/mnt" || { echo "the dev cluster did not mount; its log:"; cat "$work/dev.log"; exit 1; }
head -c 20000 /dev/urandom > "$work/mnt/warm"
sync -f "$work/mnt/warm"
copy() { # destination: prints the seconds of cp -a + fsync
	local t0 t1
	t0=$(date +%s.%N)
	cp -a "$work/src" "$1"
	python3 -c "import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd)" "$1"
	sync -f "$1"
	t1=$(date +%s.%N)
	python3 -c "print(f'{$t1 - $t0:.2f}')"
}
g=$(copy "$work/mnt/copy")
diff -r "$work/src" "$work/mnt/copy"
changed=$(rsync -a -n -i "$work/src/" "$work/mnt/copy/" | wc -l)
[ "$changed" = 0 ] || { echo "rsync -a -n -i lists $changed differences"; exit 1; }
l=$(copy "$work/local/copy")
python3 -c "print(f'cp -a of $FILES files of $SIZE bytes + fsync: govfs {$g} s, local {$l} s, govfs/local speed {$l / $g:.3f} (diff -r and rsync -n clean)')"
