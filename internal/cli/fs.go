package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/govfs/govfs/client"
	"github.com/govfs/govfs/internal/ids"
	"github.com/govfs/govfs/internal/wire"
)

// metaEnv names the environment variable that lists metadata nodes when
// --meta is not given.
const metaEnv = "GOVFS_META"

const fsUsage = `Usage: govfs fs [--meta ADDRS] [--timeout D] <command> [arguments]

Commands:
  ls [-l] [PATH...]              list directories (default /)
  stat PATH...                   show an inode's attributes
  mkdir [-p] [-m MODE] PATH...   create directories
  touch PATH...                  create files or update their times
  rm [-r] [-f] PATH...           remove files (-r: whole trees)
  rmdir PATH...                  remove empty directories
  mv [--no-replace] OLD NEW      rename; into NEW if it is a directory
  ln [-s] TARGET LINK            hard link, or symbolic with -s
  readlink PATH...               print symlink targets
  put [--verify] LOCAL REMOTE    copy a local file in (- = stdin)
  get [--verify] REMOTE LOCAL    copy a file out (- = stdout; into LOCAL if it is a directory)
  append [--verify] LOCAL REMOTE append a local file as records of up to
                                 1 MiB (- = stdin); prints the first offset
  cat REMOTE...                  print files

Metadata nodes come from --meta host:port,... or $GOVFS_META, the client
certificate directory from --tls DIR or $GOVFS_TLS (--insecure for a
cluster started with --insecure). --inline-max N keeps files of at most N
bytes (16384 by default, 0: none) inline in their ministry.
Paths are absolute; symlinks are not followed. put, get and append draw a
progress bar on stderr for large transfers when stderr is a terminal.`

// fsGlobal holds the flags shared by every fs and admin subcommand.
type fsGlobal struct {
	meta     string
	timeout  time.Duration
	tls      string
	insecure bool
	// inlineMax is --inline-max of the commands that write files (fs,
	// mount); nil for the others, which keep the client's default.
	inlineMax *int64
}

// registerWrites adds the flags of commands that write files.
func (g *fsGlobal) registerWrites(f *flag.FlagSet) {
	g.inlineMax = f.Int64("inline-max", client.DefaultInlineMax,
		"keep files of at most this many bytes inline in their ministry, with no chunk servers (0: none; at most 65536; docs/dataplane.md)")
}

func (g *fsGlobal) register(f *flag.FlagSet) {
	f.StringVar(&g.meta, "meta", "", "comma-separated metadata node addresses (default $"+metaEnv+")")
	f.DurationVar(&g.timeout, "timeout", client.DefaultOpTimeout, "give up on an operation after this long")
	f.StringVar(&g.tls, "tls", "", "client certificate directory (default $"+tlsEnv+")")
	f.BoolVar(&g.insecure, "insecure", false, "talk plaintext to a cluster started with --insecure")
}

// clientConfig is the client configuration every command starts from:
// the metadata addresses and certificate directory from flags or the
// environment, and the timeouts.
func (g *fsGlobal) clientConfig(getenv func(string) string) (client.Config, error) {
	cfg := client.DefaultConfig()
	addrs, err := metaAddrs(g.meta, getenv)
	if err != nil {
		return cfg, err
	}
	if cfg.TLSDir, err = clientTLSDir(g.tls, g.insecure, getenv); err != nil {
		return cfg, err
	}
	if g.timeout <= 0 {
		return cfg, fmt.Errorf("--timeout %v must be positive", g.timeout)
	}
	if g.inlineMax != nil {
		switch m := *g.inlineMax; {
		case m < 0 || m > 64<<10:
			return cfg, fmt.Errorf("--inline-max %d is outside [0, 65536] bytes (the ministry keeps at most 64 KiB of a file inline; 0 keeps none)", m)
		case m == 0:
			cfg.InlineMax = -1
		default:
			cfg.InlineMax = m
		}
	}
	cfg.MetaAddrs = addrs
	cfg.OpTimeout = g.timeout
	cfg.CallTimeout = min(cfg.CallTimeout, g.timeout)
	cfg.ConnectTimeout = min(cfg.ConnectTimeout, g.timeout)
	cfg.Cred = localCred()
	return cfg, nil
}

// metaAddrs returns the metadata node addresses from the flag value or,
// when empty, from the environment.
func metaAddrs(flagVal string, getenv func(string) string) ([]string, error) {
	src := flagVal
	if strings.TrimSpace(src) == "" {
		src = getenv(metaEnv)
	}
	var out []string
	for _, a := range strings.Split(src, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no metadata nodes given: pass --meta host:port[,host:port...] or set %s (`govfs dev` prints an export line for it)", metaEnv)
	}
	return out, nil
}

// dialCluster connects a client to the cluster named by g.
func dialCluster(ctx context.Context, g fsGlobal) (*client.Client, error) {
	cfg, err := g.clientConfig(os.Getenv)
	if err != nil {
		return nil, err
	}
	cfg.Logger = slog.New(slog.DiscardHandler)
	// Each command is a new client with no session, so session reads could
	// miss what the previous command in the same shell just did (a clerk
	// that has not applied it yet). Linearizable reads cost one quorum
	// round per read, nothing for a person at a shell.
	cfg.Consistency = wire.ReadConsistency_LINEARIZABLE
	return client.New(ctx, cfg)
}

// dialError describes a failure of dialCluster for command cmd.
func dialError(cmd string, err error) error {
	var ce *client.Error
	if errors.As(err, &ce) && ce.Op == "connect" {
		return &fsError{msg: fmt.Sprintf("%s: cannot reach the cluster at %s: %s", cmd, ce.Path, ce.Err), err: err}
	}
	return &fsError{msg: fmt.Sprintf("%s: %v", cmd, err), err: err}
}

// fsInvocation is a parsed `govfs fs` command line.
type fsInvocation struct {
	global    fsGlobal
	sub       string
	long      bool   // ls -l
	parents   bool   // mkdir -p
	mode      uint32 // mkdir -m
	recursive bool   // rm -r
	force     bool   // rm -f
	noReplace bool   // mv --no-replace
	symbolic  bool   // ln -s
	verify    bool   // put/get/append --verify
	args      []string
}

// fsArgCount is how many positional arguments each subcommand takes:
// at least min, and at most max (-1 = no limit).
func fsArgCount(sub string) (lo, hi int, ok bool) {
	switch sub {
	case "ls":
		return 0, -1, true
	case "stat", "mkdir", "touch", "rm", "rmdir", "readlink":
		return 1, -1, true
	case "mv", "ln", "put", "get", "append":
		return 2, 2, true
	case "cat":
		return 1, -1, true
	}
	return 0, 0, false
}

// parseFS parses the arguments of `govfs fs` without touching the network.
func parseFS(args []string, stderr io.Writer) (*fsInvocation, error) {
	inv := &fsInvocation{mode: 0o755}
	top := flag.NewFlagSet("govfs fs", flag.ContinueOnError)
	top.SetOutput(stderr)
	top.Usage = func() { fmt.Fprintln(stderr, fsUsage) }
	inv.global.register(top)
	inv.global.registerWrites(top)
	if err := top.Parse(args); err != nil {
		return nil, err
	}
	if top.NArg() == 0 {
		fmt.Fprintln(stderr, fsUsage)
		return nil, errors.New("fs: missing command")
	}
	inv.sub = top.Arg(0)
	lo, hi, ok := fsArgCount(inv.sub)
	if !ok {
		fmt.Fprintln(stderr, fsUsage)
		return nil, fmt.Errorf("fs: unknown command %q", inv.sub)
	}
	f := flag.NewFlagSet("govfs fs "+inv.sub, flag.ContinueOnError)
	f.SetOutput(stderr)
	withSubHelp(f, stderr, "fs "+inv.sub)
	// --meta and --timeout are accepted after the command too.
	f.StringVar(&inv.global.meta, "meta", inv.global.meta, "comma-separated metadata node addresses")
	f.DurationVar(&inv.global.timeout, "timeout", inv.global.timeout, "give up on an operation after this long")
	var modeStr string
	switch inv.sub {
	case "ls":
		f.BoolVar(&inv.long, "l", false, "long listing: mode, links, owner, size, mtime")
	case "mkdir":
		f.BoolVar(&inv.parents, "p", false, "create missing parents; no error if the directory exists")
		f.StringVar(&modeStr, "m", "755", "permission bits in octal")
	case "rm":
		f.BoolVar(&inv.recursive, "r", false, "remove directories and their contents")
		f.BoolVar(&inv.force, "f", false, "ignore paths that do not exist")
	case "mv":
		f.BoolVar(&inv.noReplace, "no-replace", false, "fail instead of replacing an existing NEW")
	case "ln":
		f.BoolVar(&inv.symbolic, "s", false, "make a symbolic link")
	case "put", "get", "append":
		f.BoolVar(&inv.verify, "verify", false, "print the sha256 of the bytes transferred")
	}
	if err := f.Parse(top.Args()[1:]); err != nil {
		return nil, err
	}
	if modeStr != "" {
		m, err := parseMode(modeStr)
		if err != nil {
			return nil, fmt.Errorf("fs mkdir: -m %q: %w", modeStr, err)
		}
		inv.mode = m
	}
	inv.args = f.Args()
	if n := len(inv.args); n < lo || (hi >= 0 && n > hi) {
		f.Usage()
		if lo == hi {
			return nil, fmt.Errorf("fs %s: want %d arguments, got %d", inv.sub, lo, n)
		}
		return nil, fmt.Errorf("fs %s: missing PATH", inv.sub)
	}
	if inv.sub == "ls" && len(inv.args) == 0 {
		inv.args = []string{"/"}
	}
	return inv, nil
}

// parseMode parses octal permission bits (at most 07777).
func parseMode(s string) (uint32, error) {
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || m > 0o7777 {
		return 0, errors.New("want octal permission bits such as 755")
	}
	return uint32(m), nil
}

// runFS implements `govfs fs`.
func runFS(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	inv, err := parseFS(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	cl, err := dialCluster(ctx, inv.global)
	if err != nil {
		return dialError("fs "+inv.sub, err)
	}
	defer cl.Close()
	r := &fsRunner{cl: cl, out: stdout, errOut: stderr, loc: time.Local, sub: inv.sub}
	if isTerminal(stderr) {
		r.progress = stderr
	}
	return r.run(ctx, inv)
}

// fsError is a CLI error message that keeps the client error (and so the
// errno) reachable through errors.Is/As.
type fsError struct {
	msg string
	err error
}

func (e *fsError) Error() string { return e.msg }
func (e *fsError) Unwrap() error { return e.err }

// reason is the part of err a person needs: for client errors the cause
// without the op and path, which the CLI prints its own way.
func reason(err error) string {
	var ce *client.Error
	if errors.As(err, &ce) {
		return ce.Err.Error()
	}
	return err.Error()
}

type fsRunner struct {
	cl  *client.Client
	out io.Writer
	// errOut receives notes that are not the command's output.
	errOut io.Writer
	loc    *time.Location
	sub    string
	// progress receives progress bars (a terminal), nil for none.
	progress io.Writer
}

// fail formats "fs SUB PATH: reason". Messages start at "fs" because
// main prints every error after "govfs: ".
func (r *fsRunner) fail(p string, err error) error {
	return &fsError{msg: fmt.Sprintf("fs %s %s: %s", r.sub, p, reason(err)), err: err}
}

func (r *fsRunner) run(ctx context.Context, inv *fsInvocation) error {
	switch inv.sub {
	case "mv":
		return r.mv(ctx, inv.args[0], inv.args[1], inv.noReplace)
	case "ln":
		return r.ln(ctx, inv.args[0], inv.args[1], inv.symbolic)
	case "put":
		return r.put(ctx, inv.args[0], inv.args[1], inv.verify)
	case "get":
		return r.get(ctx, inv.args[0], inv.args[1], inv.verify)
	case "append":
		return r.appendFile(ctx, inv.args[0], inv.args[1], inv.verify)
	}
	// The others take many paths: do each, report all failures.
	var errs []error
	for _, p := range inv.args {
		var err error
		switch inv.sub {
		case "ls":
			err = r.ls(ctx, p, inv.long, len(inv.args) > 1)
		case "stat":
			err = r.stat(ctx, p)
		case "mkdir":
			err = r.mkdir(ctx, p, inv.mode, inv.parents)
		case "touch":
			err = r.touch(ctx, p)
		case "rm":
			err = r.rm(ctx, p, inv.recursive, inv.force)
		case "cat":
			if _, err = r.cl.ReadFile(ctx, p, r.out); err != nil {
				err = r.fail(p, err)
			}
		case "rmdir":
			if err = r.cl.Rmdir(ctx, p); err != nil {
				err = r.fail(p, err)
			}
		case "readlink":
			var t string
			if t, err = r.cl.Readlink(ctx, p); err != nil {
				err = r.fail(p, err)
			} else {
				fmt.Fprintln(r.out, t)
			}
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ---- ls and stat ----

// lsEntry is one line of a long listing.
type lsEntry struct {
	name   string
	attr   *wire.Attr
	target string // symlinks
}

func (r *fsRunner) ls(ctx context.Context, p string, long, header bool) error {
	a, err := r.cl.Stat(ctx, p)
	if err != nil {
		return r.fail(p, err)
	}
	var entries []lsEntry
	if a.GetType() != wire.FileType_DIRECTORY {
		entries = []lsEntry{{name: p, attr: a}}
		header = false
	} else {
		ents, err := r.cl.ReaddirAll(ctx, ids.Ino(a.GetIno()))
		if err != nil {
			return r.fail(p, err)
		}
		for _, e := range ents {
			entries = append(entries, lsEntry{name: string(e.GetName()), attr: e.GetAttr()})
		}
	}
	if long {
		for i := range entries {
			e := &entries[i]
			if e.attr == nil {
				var ino uint64
				if a.GetType() == wire.FileType_DIRECTORY {
					ino = entryIno(ctx, r.cl, a, e.name)
				}
				if ino != 0 {
					e.attr, _ = r.cl.GetAttr(ctx, ids.Ino(ino))
				}
			}
			if e.attr.GetType() == wire.FileType_SYMLINK {
				if t, err := r.cl.ReadlinkIno(ctx, ids.Ino(e.attr.GetIno())); err == nil {
					e.target = t
				}
			}
		}
	}
	if header {
		fmt.Fprintf(r.out, "%s:\n", p)
	}
	if long {
		writeLongListing(r.out, entries, r.loc)
	} else {
		for _, e := range entries {
			fmt.Fprintln(r.out, e.name)
		}
	}
	return nil
}

// entryIno looks name up in dir when a listing came without attributes.
func entryIno(ctx context.Context, cl *client.Client, dir *wire.Attr, name string) uint64 {
	a, err := cl.Lookup(ctx, ids.Ino(dir.GetIno()), name)
	if err != nil {
		return 0
	}
	return a.GetIno()
}

// writeLongListing prints entries like `ls -l`, numeric columns aligned.
func writeLongListing(w io.Writer, entries []lsEntry, loc *time.Location) {
	var wl, wu, wg, ws int
	for _, e := range entries {
		wl = max(wl, len(strconv.FormatUint(uint64(e.attr.GetNlink()), 10)))
		wu = max(wu, len(strconv.FormatUint(uint64(e.attr.GetUid()), 10)))
		wg = max(wg, len(strconv.FormatUint(uint64(e.attr.GetGid()), 10)))
		ws = max(ws, len(strconv.FormatUint(e.attr.GetSize(), 10)))
	}
	for _, e := range entries {
		a := e.attr
		line := fmt.Sprintf("%s %*d %*d %*d %*d %s %s", modeString(a.GetType(), a.GetMode()),
			wl, a.GetNlink(), wu, a.GetUid(), wg, a.GetGid(), ws, a.GetSize(),
			time.Unix(0, a.GetMtimeNs()).In(loc).Format("2006-01-02 15:04"), e.name)
		if a.GetType() == wire.FileType_SYMLINK {
			line += " -> " + e.target
		}
		fmt.Fprintln(w, line)
	}
}

// modeString renders a type and permission bits like ls: drwxr-xr-x,
// with s/S for setuid and setgid and t/T for sticky.
func modeString(t wire.FileType, mode uint32) string {
	var b [10]byte
	switch t {
	case wire.FileType_DIRECTORY:
		b[0] = 'd'
	case wire.FileType_REGULAR:
		b[0] = '-'
	case wire.FileType_SYMLINK:
		b[0] = 'l'
	case wire.FileType_FIFO:
		b[0] = 'p'
	case wire.FileType_SOCKET:
		b[0] = 's'
	case wire.FileType_CHAR_DEVICE:
		b[0] = 'c'
	case wire.FileType_BLOCK_DEVICE:
		b[0] = 'b'
	default:
		b[0] = '?'
	}
	const rwx = "rwxrwxrwx"
	for i := 0; i < 9; i++ {
		if mode&(1<<(8-i)) != 0 {
			b[i+1] = rwx[i]
		} else {
			b[i+1] = '-'
		}
	}
	special := func(pos int, bit uint32, set, unset byte) {
		if mode&bit == 0 {
			return
		}
		if b[pos] == 'x' {
			b[pos] = set
		} else {
			b[pos] = unset
		}
	}
	special(3, 0o4000, 's', 'S')
	special(6, 0o2000, 's', 'S')
	special(9, 0o1000, 't', 'T')
	return string(b[:])
}

// typeName is the file type as stat(1) names it.
func typeName(t wire.FileType) string {
	switch t {
	case wire.FileType_REGULAR:
		return "regular file"
	case wire.FileType_DIRECTORY:
		return "directory"
	case wire.FileType_SYMLINK:
		return "symbolic link"
	case wire.FileType_FIFO:
		return "fifo"
	case wire.FileType_SOCKET:
		return "socket"
	case wire.FileType_CHAR_DEVICE:
		return "character special file"
	case wire.FileType_BLOCK_DEVICE:
		return "block special file"
	}
	return "unknown"
}

func (r *fsRunner) stat(ctx context.Context, p string) error {
	a, err := r.cl.Stat(ctx, p)
	if err != nil {
		return r.fail(p, err)
	}
	target := ""
	if a.GetType() == wire.FileType_SYMLINK {
		if target, err = r.cl.ReadlinkIno(ctx, ids.Ino(a.GetIno())); err != nil {
			return r.fail(p, err)
		}
	}
	writeStat(r.out, p, a, target, r.loc)
	return nil
}

// writeStat prints attributes in the layout of stat(1).
func writeStat(w io.Writer, p string, a *wire.Attr, target string, loc *time.Location) {
	name := p
	if a.GetType() == wire.FileType_SYMLINK {
		name += " -> " + target
	}
	ts := func(ns int64) string {
		return time.Unix(0, ns).In(loc).Format("2006-01-02 15:04:05.000000000 -0700")
	}
	fmt.Fprintf(w, "  File: %s\n", name)
	fmt.Fprintf(w, "  Size: %-15d Type: %s\n", a.GetSize(), typeName(a.GetType()))
	fmt.Fprintf(w, " Inode: %-15d Links: %d\n", a.GetIno(), a.GetNlink())
	fmt.Fprintf(w, "Access: (%04o/%s)  Uid: %d  Gid: %d\n", a.GetMode()&0o7777, modeString(a.GetType(), a.GetMode()), a.GetUid(), a.GetGid())
	fmt.Fprintf(w, "Access: %s\n", ts(a.GetAtimeNs()))
	fmt.Fprintf(w, "Modify: %s\n", ts(a.GetMtimeNs()))
	fmt.Fprintf(w, "Change: %s\n", ts(a.GetCtimeNs()))
	if a.GetCrtimeNs() != 0 {
		fmt.Fprintf(w, " Birth: %s\n", ts(a.GetCrtimeNs()))
	}
	fmt.Fprintf(w, "Version: %d\n", a.GetVersion())
}

// ---- creating ----

func (r *fsRunner) mkdir(ctx context.Context, p string, mode uint32, parents bool) error {
	if !parents {
		if _, err := r.cl.Mkdir(ctx, p, mode); err != nil {
			return r.fail(p, err)
		}
		return nil
	}
	if !strings.HasPrefix(p, "/") {
		return r.fail(p, syscall.EINVAL)
	}
	clean := path.Clean(p)
	if clean == "/" {
		return nil
	}
	comps := strings.Split(clean[1:], "/")
	for i := range comps {
		dir := "/" + strings.Join(comps[:i+1], "/")
		m := uint32(0o755)
		if i == len(comps)-1 {
			m = mode
		}
		_, err := r.cl.Mkdir(ctx, dir, m)
		if errors.Is(err, syscall.EEXIST) {
			a, serr := r.cl.Stat(ctx, dir)
			if serr == nil && a.GetType() == wire.FileType_DIRECTORY {
				continue
			}
		}
		if err != nil {
			return r.fail(dir, err)
		}
	}
	return nil
}

// touch creates p as an empty regular file if absent and sets its access
// and modification times to now either way.
func (r *fsRunner) touch(ctx context.Context, p string) error {
	_, err := r.cl.Create(ctx, p, 0o644, false)
	if err != nil && !errors.Is(err, syscall.EEXIST) {
		return r.fail(p, err)
	}
	// NB: a non-exclusive create returns an existing file unchanged, so
	// the times are set in a second step (also for a new file, harmless).
	if err := r.cl.Utimes(ctx, p, time.Time{}, time.Time{}); err != nil {
		return r.fail(p, err)
	}
	return nil
}

// ---- removing ----

func (r *fsRunner) rm(ctx context.Context, p string, recursive, force bool) error {
	if !recursive {
		err := r.cl.Remove(ctx, p)
		if err != nil && !(force && errors.Is(err, syscall.ENOENT)) {
			return r.fail(p, err)
		}
		return nil
	}
	a, err := r.cl.Stat(ctx, p)
	if err != nil {
		if force && errors.Is(err, syscall.ENOENT) {
			return nil
		}
		return r.fail(p, err)
	}
	if a.GetType() != wire.FileType_DIRECTORY {
		if err := r.cl.Remove(ctx, p); err != nil && !(force && errors.Is(err, syscall.ENOENT)) {
			return r.fail(p, err)
		}
		return nil
	}
	if path.Clean(p) == "/" {
		return &fsError{msg: "fs rm /: refusing to remove the root directory"}
	}
	parent, err := r.cl.Stat(ctx, path.Dir(path.Clean(p)))
	if err != nil {
		return r.fail(p, err)
	}
	return r.removeTree(ctx, ids.Ino(parent.GetIno()), path.Base(path.Clean(p)), path.Clean(p), ids.Ino(a.GetIno()))
}

// removeTree removes directory name (inode ino) in parent after its
// contents, depth first. display is its path for error messages.
func (r *fsRunner) removeTree(ctx context.Context, parent ids.Ino, name, display string, ino ids.Ino) error {
	// NB: list again after a pass: entries created meanwhile would make
	// rmdir fail with ENOTEMPTY. A bounded number of passes, then rmdir
	// reports what is left.
	for pass := 0; pass < 3; pass++ {
		ents, err := r.cl.ReaddirAll(ctx, ino)
		if err != nil {
			return r.fail(display, err)
		}
		if len(ents) == 0 {
			break
		}
		for _, e := range ents {
			child := path.Join(display, string(e.GetName()))
			if e.GetType() == wire.FileType_DIRECTORY {
				err = r.removeTree(ctx, ino, string(e.GetName()), child, ids.Ino(e.GetIno()))
			} else if err = r.cl.UnlinkAt(ctx, ino, string(e.GetName())); errors.Is(err, syscall.ENOENT) {
				err = nil // raced with another remover
			} else if err != nil {
				err = r.fail(child, err)
			}
			if err != nil {
				return err
			}
		}
	}
	if err := r.cl.RmdirAt(ctx, parent, name); err != nil && !errors.Is(err, syscall.ENOENT) {
		return r.fail(display, err)
	}
	return nil
}

// ---- renaming and linking ----

// intoDir returns dst/base(src) when dst is an existing directory, else
// dst, like mv(1) and ln(1).
func (r *fsRunner) intoDir(ctx context.Context, src, dst string) (string, error) {
	a, err := r.cl.Stat(ctx, dst)
	switch {
	case errors.Is(err, syscall.ENOENT):
		return dst, nil
	case err != nil:
		return "", r.fail(dst, err)
	case a.GetType() == wire.FileType_DIRECTORY:
		return path.Join(dst, path.Base(path.Clean(src))), nil
	}
	return dst, nil
}

func (r *fsRunner) mv(ctx context.Context, oldp, newp string, noReplace bool) error {
	dst, err := r.intoDir(ctx, oldp, newp)
	if err != nil {
		return err
	}
	var flags uint32
	if noReplace {
		flags = client.RenameNoReplace
	}
	if err := r.cl.Rename(ctx, oldp, dst, flags); err != nil {
		return &fsError{msg: fmt.Sprintf("fs mv %s %s: %s", oldp, dst, reason(err)), err: err}
	}
	return nil
}

func (r *fsRunner) ln(ctx context.Context, target, link string, symbolic bool) error {
	dst, err := r.intoDir(ctx, target, link)
	if err != nil {
		return err
	}
	if symbolic {
		_, err = r.cl.Symlink(ctx, target, dst)
	} else {
		_, err = r.cl.Link(ctx, target, dst)
	}
	if err != nil {
		return &fsError{msg: fmt.Sprintf("fs ln %s %s: %s", target, dst, reason(err)), err: err}
	}
	return nil
}

// localCred is this process's identity: the caller the ministry checks
// permissions against (and the certificate must allow).
func localCred() *wire.Cred {
	cred := &wire.Cred{Uid: uint32(os.Getuid()), Gid: uint32(os.Getgid())}
	if gs, err := os.Getgroups(); err == nil {
		for _, g := range gs {
			if uint32(g) != cred.Gid {
				cred.Groups = append(cred.Groups, uint32(g))
			}
		}
	}
	return cred
}
