#!/usr/bin/env bash
# fio through a GovFS mount and on a local directory of the same disk, in
# one run (docs/benchmarks.md, "fio through the mount"): the issue's psync
# jobs, 1 MiB sequential write and read of 1 GiB, 4 KiB random read and
# write by 4 jobs. Starts a `govfs dev` cluster with a mount in a temp
# directory and stops it (by PID) at the end. Needs fio (installed here
# from Debian when missing) and, to drop the page cache, root.
#
#   make bench-fio                 # or: scripts/bench-fio.sh [SIZE]
set -euo pipefail
cd "$(dirname "$0")/.."
size=${1:-1G}
command -v fio >/dev/null || { apt-get update -qq && apt-get install -y -qq fio; }
bin=$PWD/bin/govfs
[ -x "$bin" ] || make build

work=$(mktemp -d /tmp/govfs-fio-XXXXXX)
mkdir -p "$work/mnt" "$work/local"
"$bin" dev --dir "$work/cluster" --mount "$work/mnt" >"$work/dev.log" 2>&1 &
dev=$!
cleanup() {
	kill "$dev" 2>/dev/null || true
	wait "$dev" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
for _ in $(seq 100); do
	mountpoint -q "$work/mnt" && break
	kill -0 "$dev" 2>/dev/null || { cat "$work/dev.log"; exit 1; }
	sleep 0.2
done
mountpoint -q "$work/mnt" || { echo "the mount did not come up"; cat "$work/dev.log"; exit 1; }
mkdir -p "$work/mnt/fio"
# Let start-up settle before the first timed job: right after a fresh
# cluster starts, its first sequential write measured 206 MiB/s and the
# next 359 (Raft logs, Pebble and a deleted previous run still being
# written back); 15 s later the first one measured 315.
sync
sleep 15

drop() { sync; [ "$(id -u)" = 0 ] && echo 3 >/proc/sys/vm/drop_caches || true; }
job() { # dir rw bs [extra...] -> one terse line
	local dir=$1 rw=$2 bs=$3
	shift 3
	# One file for every job (written by the first): the random jobs
	# reuse it instead of laying out a file each.
	fio --name=bench --directory="$dir" --filename=fio.dat --ioengine=psync --bs="$bs" --rw="$rw" --size="$size" \
		--group_reporting --output-format=terse "$@" 2>/dev/null
}
run() { # label dir
	local label=$1 dir=$2 w r rr rw
	w=$(job "$dir" write 1M --end_fsync=1 | awk -F';' '{printf "%.1f", $48/1024}')
	drop
	r=$(job "$dir" read 1M | awk -F';' '{printf "%.1f", $7/1024}')
	drop
	rr=$(job "$dir" randread 4k --numjobs=4 --runtime=15 --time_based | awk -F';' '{printf "%.0f", $8}')
	rw=$(job "$dir" randwrite 4k --numjobs=4 --runtime=15 --time_based --end_fsync=1 | awk -F';' '{printf "%.0f", $49}')
	printf '%-8s seq_write %8s MiB/s  seq_read %8s MiB/s  randread_4k %7s IOPS  randwrite_4k %7s IOPS\n' "$label" "$w" "$r" "$rr" "$rw"
}
run govfs "$work/mnt/fio"
run local "$work/local"
