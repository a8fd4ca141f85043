#!/usr/bin/env bash
# cp -a of many small chunk files through the mount (docs/benchmarks.md,
# "a new file's bytes queue behind its create"): a fresh `govfs dev`
# cluster with its FUSE mount, a warm-up file, then cp -a of a tree of
# FILES random files of SIZE bytes and an fsync of the copy's top
# directory (the copy counts once every queued change is committed);
# diff -r and rsync -a -n -i must find nothing.
#
#   scripts/bench-cp.sh [BINARY] [FILES] [SIZE]   (default bin/govfs, 300, 10240)
set -euo pipefail
B=${1:-bin/govfs}
FILES=${2:-300}
SIZE=${3:-10240}
work=$(mktemp -d /tmp/bench-cp.XXXXXX)
mkdir -p "$work/mnt" "$work/src"
for i in $(seq 1 "$FILES"); do head -c "$SIZE" /dev/urandom > "$work/src/f$i"; done
setsid "$B" dev --dir "$work/dev" --mount "$work/mnt" > "$work/dev.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 1 60); do mountpoint -q "$work/mnt" && break; sleep 1; done
mountpoint -q "$work/mnt" || { echo "the dev cluster did not mount; its log:"; cat "$work/dev.log"; exit 1; }
head -c 20000 /dev/urandom > "$work/mnt/warm"
sync -f "$work/mnt/warm"
t0=$(date +%s.%N)
cp -a "$work/src" "$work/mnt/copy"
python3 -c "import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd)" "$work/mnt/copy"
t1=$(date +%s.%N)
diff -r "$work/src" "$work/mnt/copy"
changed=$(rsync -a -n -i "$work/src/" "$work/mnt/copy/" | wc -l)
[ "$changed" = 0 ] || { echo "rsync -a -n -i lists $changed differences"; exit 1; }
python3 -c "print(f'cp -a of $FILES files of $SIZE bytes + fsync: {$t1 - $t0:.2f} s (diff -r and rsync -n clean)')"
