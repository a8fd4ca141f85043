package cli

import (
	"flag"
	"fmt"
	"io"
)

// subHelp is each fs and admin subcommand's synopsis, description and
// examples, printed before its flags by -h (and govfs help).
var subHelp = map[string]string{
	"fs ls": `Usage: govfs fs ls [-l] [PATH...]

Lists directories (/ when none is given), or names a file.

Examples:
  govfs fs ls /
  govfs fs ls -l /projects /home`,
	"fs stat": `Usage: govfs fs stat PATH...

Shows an inode's attributes: type, mode, owner, size, links, times, inode number.

Example:
  govfs fs stat /projects/report.pdf`,
	"fs mkdir": `Usage: govfs fs mkdir [-p] [-m MODE] PATH...

Creates directories (-p: with missing parents, no error if present).

Example:
  govfs fs mkdir -p -m 750 /projects/a/b`,
	"fs touch": `Usage: govfs fs touch PATH...

Creates empty files, or sets the times of existing ones to now.

Example:
  govfs fs touch /tmp/flag`,
	"fs rm": `Usage: govfs fs rm [-r] [-f] PATH...

Removes files and symbolic links; -r also directories with everything in
them; -f ignores paths that do not exist.

Example:
  govfs fs rm -r /scratch/old-run`,
	"fs rmdir": `Usage: govfs fs rmdir PATH...

Removes empty directories.

Example:
  govfs fs rmdir /projects/empty`,
	"fs mv": `Usage: govfs fs mv [--no-replace] OLD NEW

Renames OLD to NEW (into NEW when it is a directory); --no-replace fails
instead of replacing an existing NEW. Renames across ministries are not
built yet (EXDEV).

Example:
  govfs fs mv /projects/draft.txt /projects/final.txt`,
	"fs ln": `Usage: govfs fs ln [-s] TARGET LINK

Makes a hard link LINK to the file TARGET, or with -s a symbolic link
whose text is TARGET.

Examples:
  govfs fs ln /data/big.bin /data/big-alias.bin
  govfs fs ln -s ../shared /home/alice/shared`,
	"fs readlink": `Usage: govfs fs readlink PATH...

Prints the text of symbolic links.

Example:
  govfs fs readlink /home/alice/shared`,
	"fs put": `Usage: govfs fs put [--verify] LOCAL REMOTE

Copies the local file LOCAL (- for stdin) to REMOTE, created or
truncated; its size is set last, so a reader never sees a size whose
bytes are not stored. --verify prints the sha256 of the bytes sent.

Examples:
  govfs fs put ./model.bin /models/model.bin
  tar c ./src | govfs fs put - /backups/src.tar`,
	"fs get": `Usage: govfs fs get [--verify] REMOTE LOCAL

Copies REMOTE to the local LOCAL (- for stdout; into LOCAL when it is a
directory, as cp does). The local file appears only once complete.

Examples:
  govfs fs get /models/model.bin ./
  govfs fs get --verify /backups/src.tar - | tar x`,
	"fs append": `Usage: govfs fs append [--verify] LOCAL REMOTE

Appends the local file LOCAL (- for stdin) to REMOTE (created if
missing) as atomic records of up to 1 MiB and prints the first record's
offset. Each record lands whole, but a record that does not fit in the
rest of a chunk goes to the next one, and another appender's records may
come between: larger input is not contiguous (it says so). For a byte
exact copy use fs put.

Example:
  echo "$(date) job done" | govfs fs append - /logs/jobs.log`,
	"fs cat": `Usage: govfs fs cat REMOTE...

Prints files to stdout.

Example:
  govfs fs cat /etc-shared/hosts`,
	"admin status": `Usage: govfs admin status [--json] [--bytes]

Shows the metadata nodes (reachable, the certificate each is bound to),
every Raft group (leader, term, indexes, each node's role), the chunk
servers (liveness, space, load) and the replica groups (ok, syncing,
under-replicated). Exits non-zero when no member answers.

Example:
  govfs admin status --json | jq '.replica_groups'`,
	"admin ministries": `Usage: govfs admin ministries [--json]

Lists the ministries: their subtrees, members, minister and epoch, and
the subtree moves under way or recently finished.

Example:
  govfs admin ministries`,
	"admin nodes": `Usage: govfs admin nodes [--json]

Lists the metadata nodes: address, liveness, CPU, and their role in each
group they host (from their heartbeats to the president).

Example:
  govfs admin nodes`,
	"admin assign": `Usage: govfs admin assign PATH (--new [--nodes ID,ID,ID] | --ministry ID)

Gives the directory PATH and everything below it to a new ministry (on
the nodes given, else chosen by load) or to an existing one, online: the
subtree is frozen (changes inside it wait; the rest of the namespace
goes on), copied, and then served by its new ministry. The pause grows
with the subtree's size (docs/metadata.md).

Examples:
  govfs admin assign /projects --new
  govfs admin assign /home --ministry 2`,
	"admin unassign": `Usage: govfs admin unassign PATH

Gives the subtree PATH back to the ministry of its parent directory.

Example:
  govfs admin unassign /projects`,
	"admin move-replica": `Usage: govfs admin move-replica MINISTRY --from NODE [--to NODE] [--no-wait] [--json]

Moves ministry MINISTRY's replica from node --from to node --to (default:
the live node hosting the fewest group replicas), online: the new node
joins as a learner, catches up from the log or a snapshot, becomes a
voter, and then the old one leaves and deletes its copy (a minister that
leaves hands its leadership over first). Waits until the group's voters
are the new members unless --no-wait; see govfs admin ministries.

Example:
  govfs admin move-replica 2 --from 3 --to 5`,
	"admin drain": `Usage: govfs admin drain NODE [--to NODE] [--no-wait] [--json]

Moves every ministry replica NODE holds to other live nodes (each to the
one hosting the fewest replicas, or all to --to), as move-replica does,
so that NODE can be taken out of service. If one replica has nowhere to
go, nothing moves. A node among the president group's voters (the
--peers of formation) keeps voting there.

Example:
  govfs admin drain 3`,
	"admin ca init": `Usage: govfs admin ca init DIR [--cluster NAME] [--days N]

Makes a cluster CA in DIR (ca.crt, and ca.key, which signs every
certificate: keep it off the cluster). docs/security.md.

Example:
  govfs admin ca init /secure/govfs-ca`,
	"admin cert issue": `Usage: govfs admin cert issue --ca DIR --out DIR (--node NAME | --chunk NAME | --client NAME | --admin NAME)
       [--uid LIST|'*'] [--gid LIST|'*'] [--squash] [--days N]

Issues a certificate signed by the CA into --out (ca.crt, tls.crt,
tls.key; replacing files there, which running processes pick up). A
client or admin certificate lists the uids and gids it may act as ('*':
any, as a mount host); --squash maps root to nobody. docs/security.md.

Examples:
  govfs admin cert issue --ca /secure/govfs-ca --node meta1 --out /etc/govfs/tls/meta
  govfs admin cert issue --ca /secure/govfs-ca --client alice --uid 1000 --gid 1000 --out ~alice/.govfs`,
}

// withSubHelp gives f the usage of subcommand name ("fs put") when there
// is one.
func withSubHelp(f *flag.FlagSet, w io.Writer, name string) {
	text, ok := subHelp[name]
	if !ok {
		return
	}
	f.Usage = func() {
		fmt.Fprintln(w, text)
		fmt.Fprintln(w, "\nFlags:")
		f.PrintDefaults()
	}
}
