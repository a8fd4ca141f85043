#!/usr/bin/env bash
# A MooseFS cluster beside GovFS, for side-by-side figures
# (docs/benchmarks.md): 1 master and 3 chunk servers (Debian's moosefs
# packages, installed when missing) in a network namespace of their own,
# and an mfsmount of it on MNT in this machine's mount namespace. MooseFS
# refuses chunk servers on a loopback address, so the namespace's lo
# also has 10.211.0.1; no traffic leaves the namespace.
#
#   scripts/moosefs-netns.sh up DIR MNT [COPIES]   (COPIES default 2, as the issue's MooseFS)
#   MNT2=DIR2 ...: also a second mfsmount on DIR2 (another client)
#   scripts/moosefs-netns.sh down DIR
#
# FSYNC=1 makes the chunk servers fsync a chunk before its write is
# acknowledged (HDD_FSYNC_BEFORE_CLOSE = 1); MooseFS's default (0) does
# not, where GovFS's chunk servers always do: compare both ways.
#
# `up` leaves the processes running (their PIDs in DIR/pids) until
# `down`, which unmounts MNT, stops them by PID and removes the namespace.
set -euo pipefail
ns=govfs-mfs
ip4=10.211.0.1

need() {
	if ! command -v mfsmaster >/dev/null || ! command -v mfschunkserver >/dev/null || ! command -v mfsmount >/dev/null; then
		echo "installing moosefs-master, moosefs-chunkserver and moosefs-client (Debian packages)"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q moosefs-master moosefs-chunkserver moosefs-client >/dev/null
	fi
}

up() {
	local dir=$1 mnt=$2 copies=${3:-2}
	[ "$(id -u)" = 0 ] || { echo "moosefs-netns.sh: needs root (network namespace, mount)"; exit 1; }
	need
	if ip netns list | grep -qw "$ns"; then
		echo "moosefs-netns.sh: namespace $ns exists: run '$0 down DIR' of the earlier run first"
		exit 1
	fi
	mkdir -p "$dir" "$mnt"
	dir=$(cd "$dir" && pwd)
	ip netns add "$ns"
	ip netns exec "$ns" ip link set lo up
	ip netns exec "$ns" ip addr add "$ip4/32" dev lo
	: > "$dir/pids"

	mkdir -p "$dir/master"
	[ -e "$dir/master/metadata.mfs" ] || echo "MFSM NEW" > "$dir/master/metadata.mfs"
	echo "*	/	rw,alldirs,admin,maproot=0:0" > "$dir/mfsexports.cfg"
	: > "$dir/mfstopology.cfg"
	cat > "$dir/mfsmaster.cfg" <<-EOF
	WORKING_USER = root
	WORKING_GROUP = root
	DATA_PATH = $dir/master
	EXPORTS_FILENAME = $dir/mfsexports.cfg
	TOPOLOGY_FILENAME = $dir/mfstopology.cfg
	MATOML_LISTEN_HOST = $ip4
	MATOCS_LISTEN_HOST = $ip4
	MATOCL_LISTEN_HOST = $ip4
	NICE_LEVEL = 0
	EOF
	ip netns exec "$ns" setsid mfsmaster -f -c "$dir/mfsmaster.cfg" > "$dir/master.log" 2>&1 &
	echo $! >> "$dir/pids"
	for i in 1 2 3; do
		mkdir -p "$dir/cs$i/disk"
		echo "$dir/cs$i/disk" > "$dir/cs$i/mfshdd.cfg"
		cat > "$dir/cs$i/mfschunkserver.cfg" <<-EOF
		WORKING_USER = root
		WORKING_GROUP = root
		DATA_PATH = $dir/cs$i
		HDD_CONF_FILENAME = $dir/cs$i/mfshdd.cfg
		HDD_LEAVE_SPACE_DEFAULT = 64MiB
		HDD_FSYNC_BEFORE_CLOSE = ${FSYNC:-0}
		MASTER_HOST = $ip4
		BIND_HOST = $ip4
		CSSERV_LISTEN_HOST = $ip4
		CSSERV_LISTEN_PORT = $((9422 + 10 * i))
		NICE_LEVEL = 0
		EOF
		ip netns exec "$ns" setsid mfschunkserver -f -c "$dir/cs$i/mfschunkserver.cfg" > "$dir/cs$i.log" 2>&1 &
		echo $! >> "$dir/pids"
	done
	# The client joins the namespace's network only, so that its FUSE
	# mount is in this mount namespace.
	local up=0
	for _ in $(seq 1 30); do
		if nsenter --net=/run/netns/$ns mfsmount "$mnt" -H "$ip4" >> "$dir/mount.log" 2>&1; then
			up=1
			break
		fi
		sleep 1
	done
	[ $up = 1 ] || { echo "moosefs-netns.sh: mfsmount failed; see $dir/*.log"; down "$dir"; exit 1; }
	echo "$mnt" > "$dir/mnt"
	if [ -n "${MNT2:-}" ]; then
		# A second client of the same file system (another machine's
		# mount: cold reads of what the first one wrote).
		mkdir -p "$MNT2"
		nsenter --net=/run/netns/$ns mfsmount "$MNT2" -H "$ip4" >> "$dir/mount.log" 2>&1 ||
			{ echo "moosefs-netns.sh: the second mfsmount failed; see $dir/mount.log"; down "$dir"; exit 1; }
		echo "$MNT2" >> "$dir/mnt"
	fi
	# Wait for the chunk servers to register, then set the copies.
	for _ in $(seq 1 30); do
		n=$(cat "$dir"/cs?.log | grep -ci "connected to master" || true)
		[ "$n" -ge 3 ] && break
		sleep 1
	done
	# The tools talk to the master themselves: from its namespace.
	nsenter --net=/run/netns/$ns mfssetgoal -r "$copies" "$mnt" > /dev/null
	echo "MooseFS on $mnt${MNT2:+ and $MNT2}: master and 3 chunk servers in network namespace $ns ($ip4), $copies copies, chunk fsync ${FSYNC:-0}; '$0 down $dir' stops it"
}

down() {
	local dir=$1
	if [ -f "$dir/mnt" ]; then
		while read -r m; do
			umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
		done < "$dir/mnt"
		rm -f "$dir/mnt"
	fi
	if [ -f "$dir/pids" ]; then
		# mfsmount detached itself: its PID is found by the namespace.
		for p in $(cat "$dir/pids") $(ip netns pids "$ns" 2>/dev/null); do
			kill "$p" 2>/dev/null || true
		done
		for _ in $(seq 1 50); do
			alive=0
			for p in $(cat "$dir/pids"); do kill -0 "$p" 2>/dev/null && alive=1; done
			[ $alive = 0 ] && break
			sleep 0.2
		done
		for p in $(cat "$dir/pids"); do kill -9 "$p" 2>/dev/null || true; done
		rm -f "$dir/pids"
	fi
	ip netns del "$ns" 2>/dev/null || true
}

case "${1:-}" in
up) [ $# -ge 3 ] || { echo "usage: $0 up DIR MNT [COPIES]"; exit 2; }; up "$2" "$3" "${4:-2}" ;;
down) [ $# -ge 2 ] || { echo "usage: $0 down DIR"; exit 2; }; down "$2" ;;
*) echo "usage: $0 up DIR MNT [COPIES] | down DIR"; exit 2 ;;
esac
