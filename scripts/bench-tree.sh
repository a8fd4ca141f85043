#!/usr/bin/env bash
# Everyday work on a real tree through the mount (docs/benchmarks.md, "a
# real tree"): a fresh `govfs dev` cluster with its FUSE mount, then in
# turn, each step timed:
#   cp -a TREE, then an fsync of the copy's top directory (the copy counts
#     once every queued change is committed); the copy is then checked
#     with diff -r and rsync -a -n -i (modification times), untimed;
#   cold read: every file of the copy read (find | xargs cat, one process)
#     through a second mount of the same file system, as another machine
#     would (issue 12 item 3);
#   grep -r over the copy;
#   tar -x of TREE (tarred beforehand) and fsync;
#   git clone of REPO (default: the repository this script is in) and fsync;
#   rm -rf of the copy.
# The page cache is dropped before cp -a, grep -r and tar -x (root only).
# The same steps on a local directory give the baseline of the same run,
# and on every other directory named NAME=DIR (another file system's
# mount, e.g. moosefs=/mnt/mfs from scripts/moosefs-netns.sh); each line
# ends with GovFS's speed relative to it. NAME=DIR:DIR2 names a second
# mount of the same file system for the cold read (MNT2=DIR2 with
# moosefs-netns.sh); without it the cold read goes through DIR again.
# GovFS's second mount is a second `govfs mount` process; the local
# directory's cold read is of the page cache dropped.
#
#   scripts/bench-tree.sh [BINARY] [TREE] [NAME=DIR[:DIR2] ...]   (default bin/govfs, /usr/include)
#   REPO=/path/to/repo scripts/bench-tree.sh ...
set -euo pipefail
# rsync checks the copies' modification times; git clones. Debian
# packages, installed when missing (as root).
for tool in rsync git; do
	command -v $tool >/dev/null && continue
	[ "$(id -u)" = 0 ] || { echo "bench-tree.sh: needs $tool (apt-get install $tool)"; exit 1; }
	apt-get install -y $tool >/dev/null 2>&1 || { apt-get update >/dev/null 2>&1 && apt-get install -y $tool >/dev/null 2>&1; } ||
		{ echo "bench-tree.sh: could not install $tool"; exit 1; }
done
B=${1:-bin/govfs}
TREE=${2:-/usr/include}
shift $(($# < 2 ? $# : 2))
REPO=${REPO:-$(cd "$(dirname "$0")/.." && pwd)}
work=$(mktemp -d /tmp/bench-tree.XXXXXX)
D=$work/dev M=$work/mnt M2=$work/mnt2 L=$work/local
mkdir -p "$M" "$M2" "$L"
drop() { sync; [ "$(id -u)" = 0 ] && echo 3 > /proc/sys/vm/drop_caches || true; }
now() { date +%s.%N; }
secs() { python3 -c "print(f'{$2 - $1:.2f}')"; }
fsyncdir() { python3 -c "import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd)" "$1"; sync -f "$1"; }

tar -cf "$work/tree.tar" -C "$(dirname "$TREE")" "$(basename "$TREE")"
setsid "$B" dev --dir "$D" --mount "$M" > "$work/dev.log" 2>&1 &
pid=$!
pid2=
made=()
trap '[ -n "$pid2" ] && { kill $pid2 2>/dev/null; wait $pid2 2>/dev/null; }; kill $pid 2>/dev/null; wait $pid 2>/dev/null; for d in "${made[@]}"; do rm -rf "$d"; done; rm -rf "$work"' EXIT
for _ in $(seq 1 60); do mountpoint -q "$M" && break; sleep 1; done
mountpoint -q "$M" || { echo "the dev cluster did not mount; its log:"; cat "$work/dev.log"; exit 1; }
# The second mount: another client process of the same cluster.
meta=$(sed -n 's/.*export GOVFS_META=//p' "$work/dev.log" | head -1)
setsid "$B" mount --meta "$meta" --tls "$D/tls/admin" "$M2" > "$work/mount2.log" 2>&1 &
pid2=$!
for _ in $(seq 1 30); do mountpoint -q "$M2" && break; sleep 1; done
mountpoint -q "$M2" || { echo "the second mount did not come up; its log:"; cat "$work/mount2.log"; exit 1; }

declare -A T
run() { # name dir dir2
	local n=$1 dir=$2 dir2=$3 t0 t1 changed
	drop; t0=$(now); cp -a "$TREE" "$dir/tree"; fsyncdir "$dir/tree"; t1=$(now); T[$n,cp]=$(secs "$t0" "$t1")
	diff -r "$TREE" "$dir/tree" > /dev/null || { echo "$n: diff -r finds the copy different"; exit 1; }
	changed=$(rsync -a -n -i "$TREE/" "$dir/tree/" | wc -l)
	drop; t0=$(now); (cd "$dir2/tree" && find . -type f -print0 | xargs -0 cat > /dev/null); t1=$(now); T[$n,read2]=$(secs "$t0" "$t1")
	drop; t0=$(now); grep -r zzzqqq-not-there "$dir/tree" > /dev/null || true; t1=$(now); T[$n,grep]=$(secs "$t0" "$t1")
	drop; t0=$(now); mkdir "$dir/x"; tar -xf "$work/tree.tar" -C "$dir/x"; fsyncdir "$dir/x"; t1=$(now); T[$n,tar]=$(secs "$t0" "$t1")
	t0=$(now); git clone -q --no-hardlinks "$REPO" "$dir/repo"; fsyncdir "$dir/repo"; t1=$(now); T[$n,git]=$(secs "$t0" "$t1")
	t0=$(now); rm -rf "$dir/tree"; sync -f "$dir"; t1=$(now); T[$n,rm]=$(secs "$t0" "$t1")
	rm -rf "$dir/x" "$dir/repo"
	echo "$n: cp -a + fsync ${T[$n,cp]} s, cold read ${T[$n,read2]} s, grep -r ${T[$n,grep]} s, tar -x + fsync ${T[$n,tar]} s, git clone + fsync ${T[$n,git]} s, rm -rf ${T[$n,rm]} s; rsync -n -i lists $changed differences"
}
ratios() { # name: GovFS's speed relative to it, per step
	local n=$1 line="govfs speed / $n:"
	for s in cp read2 grep tar git rm; do
		line+=" $s $(python3 -c "print(f'{${T[$n,$s]} / max(${T[govfs,$s]}, 0.001):.2f}')")"
	done
	echo "$line"
}
run govfs "$M" "$M2"
run local "$L" "$L"
names=(local)
for arg in "$@"; do
	name=${arg%%=*} dirs=${arg#*=}
	dir=${dirs%%:*} dir2=${dirs#*:}
	[ -d "$dir" ] || { echo "$arg: $dir is not a directory"; exit 1; }
	[ -d "$dir2" ] || { echo "$arg: $dir2 is not a directory"; exit 1; }
	sub=$(mktemp -d "$dir/bench-tree.XXXXXX")
	made+=("$sub")
	run "$name" "$sub" "$dir2/$(basename "$sub")"
	names+=("$name")
done
for n in "${names[@]}"; do ratios "$n"; done
