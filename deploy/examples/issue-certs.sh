#!/bin/sh
# Makes the cluster CA and every certificate of the three-machine cluster
# of docs/deploy.md, on an administration machine. Copy $OUT/hostN/tls to
# /etc/govfs/tls on hostN, $OUT/client/tls to /etc/govfs/tls on each
# client host, and keep $CA (its key signs certificates) off the cluster.
set -eu
GOVFS=${GOVFS:-govfs}
CA=${CA:-/secure/govfs-ca}
OUT=${OUT:-/secure/govfs-out}
"$GOVFS" admin ca init "$CA"
for i in 1 2 3; do
	"$GOVFS" admin cert issue --ca "$CA" --node "meta$i" --out "$OUT/host$i/tls/meta"
	"$GOVFS" admin cert issue --ca "$CA" --chunk "chunk$i" --out "$OUT/host$i/tls/chunk"
done
# A client host's mount acts for all its users (their opens are checked
# on the host, as NFS trusts AUTH_SYS hosts); add --squash to map root
# to nobody.
"$GOVFS" admin cert issue --ca "$CA" --client mounthost --uid '*' --gid '*' --out "$OUT/client/tls/mount"
# The operators' certificate, for govfs admin and govfs fs.
"$GOVFS" admin cert issue --ca "$CA" --admin ops --uid '*' --gid '*' --out "$OUT/client/tls/admin"
