package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/govfs/govfs/internal/certs"
)

// adminCA implements `govfs admin ca init DIR`.
func adminCA(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "init" {
		return errors.New("admin ca: want 'ca init DIR [--cluster NAME] [--days N]'")
	}
	f := flag.NewFlagSet("govfs admin ca init", flag.ContinueOnError)
	f.SetOutput(stderr)
	withSubHelp(f, stderr, "admin ca init")
	cluster := f.String("cluster", "", "a name for the cluster, shown in the CA's subject (default: the directory's name)")
	days := f.Int("days", int(certs.DefaultCAValidity/(24*time.Hour)), "days the CA is valid")
	pos, err := parseInterleaved(f, args[1:])
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return errors.New("admin ca init: give exactly one directory")
	}
	if *days <= 0 {
		return fmt.Errorf("admin ca init: --days %d must be positive", *days)
	}
	dir, err := filepath.Abs(pos[0])
	if err != nil {
		return err
	}
	name := *cluster
	if name == "" {
		name = filepath.Base(dir)
	}
	if err := certs.InitCA(dir, name, time.Duration(*days)*24*time.Hour, time.Now()); err != nil {
		return fmt.Errorf("admin ca init: %w", err)
	}
	fmt.Fprintf(stdout, "cluster CA %q made in %s\n  %s: give it to every process (cert issue copies it)\n  %s: keep it secret and off the cluster's machines; it signs every certificate\n",
		name, dir, certs.CAFile, certs.CAKeyFile)
	return nil
}

// adminCert implements `govfs admin cert issue|show`.
func adminCert(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New("admin cert: want 'cert issue ...' or 'cert show DIR'")
	}
	switch args[0] {
	case "issue":
		return adminCertIssue(args[1:], stdout, stderr)
	case "show":
		if len(args) != 2 {
			return errors.New("admin cert show: give one certificate directory")
		}
		st, err := certs.Load(args[1], nil)
		if err != nil {
			return fmt.Errorf("admin cert show: %w", err)
		}
		id := st.Identity()
		fmt.Fprintf(stdout, "identity  %s\nexpires   %s\n", id, st.Expires().UTC().Format(time.RFC3339))
		if id.Role == certs.RoleClient || id.Role == certs.RoleAdmin {
			fmt.Fprintf(stdout, "uids      %s\ngids      %s\nsquash    %v\n", certs.FormatIDs(id.AnyUID, id.UIDs), certs.FormatIDs(id.AnyGID, id.GIDs), id.Squash)
		}
		return nil
	}
	return fmt.Errorf("admin cert: unknown command %q (want issue or show)", args[0])
}

func adminCertIssue(args []string, stdout, stderr io.Writer) error {
	f := flag.NewFlagSet("govfs admin cert issue", flag.ContinueOnError)
	f.SetOutput(stderr)
	withSubHelp(f, stderr, "admin cert issue")
	caDir := f.String("ca", "", "the CA directory (from 'govfs admin ca init')")
	out := f.String("out", "", "directory to write ca.crt, tls.crt and tls.key into (made if missing; files there are replaced, which running processes pick up)")
	node := f.String("node", "", "a metadata node certificate with this name")
	chunk := f.String("chunk", "", "a chunk server certificate with this name")
	cl := f.String("client", "", "a client certificate for this user or host name")
	admin := f.String("admin", "", "an admin certificate (a client that may also move subtrees) with this name")
	uids := f.String("uid", "", "client/admin: the uids it may act as, comma-separated, or '*' for any (a mount host acting for its users)")
	gids := f.String("gid", "", "client/admin: the gids it may act with, comma-separated, or '*' for any")
	squash := f.Bool("squash", false, "client/admin: treat uid 0 as nobody (root squash)")
	days := f.Int("days", int(certs.DefaultValidity/(24*time.Hour)), "days the certificate is valid (at most until the CA expires)")
	pos, err := parseInterleaved(f, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("admin cert issue: unexpected arguments %q", pos)
	}
	if *caDir == "" || *out == "" {
		return errors.New("admin cert issue: --ca DIR and --out DIR are required")
	}
	if *days <= 0 {
		return fmt.Errorf("admin cert issue: --days %d must be positive", *days)
	}
	var id certs.Identity
	n := 0
	for _, c := range []struct {
		role certs.Role
		name string
	}{{certs.RoleNode, *node}, {certs.RoleChunk, *chunk}, {certs.RoleClient, *cl}, {certs.RoleAdmin, *admin}} {
		if c.name != "" {
			id = certs.Identity{Role: c.role, Name: c.name}
			n++
		}
	}
	if n != 1 {
		return errors.New("admin cert issue: give exactly one of --node, --chunk, --client and --admin")
	}
	if id.UIDs, id.AnyUID, err = certs.ParseIDList(*uids); err != nil {
		return fmt.Errorf("admin cert issue: --uid: %w", err)
	}
	if id.GIDs, id.AnyGID, err = certs.ParseIDList(*gids); err != nil {
		return fmt.Errorf("admin cert issue: --gid: %w", err)
	}
	id.Squash = *squash
	if (id.Role == certs.RoleClient || id.Role == certs.RoleAdmin) && len(id.UIDs) == 0 && !id.AnyUID {
		return fmt.Errorf("admin cert issue: a %s certificate pins the uids it may act as: give --uid (e.g. --uid %d, or --uid '*' for a mount host)", id.Role, 1000)
	}
	b, err := certs.Issue(*caDir, id, time.Duration(*days)*24*time.Hour, time.Now())
	if err != nil {
		return fmt.Errorf("admin cert issue: %w", err)
	}
	if err := b.Write(*out); err != nil {
		return fmt.Errorf("admin cert issue: %w", err)
	}
	fmt.Fprintf(stdout, "%s certificate issued into %s (valid %d days)\n", id, *out, *days)
	return nil
}

// parseInterleaved parses flags that may come before or after positional
// arguments and returns the positional ones.
func parseInterleaved(f *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	rest := args
	for {
		if err := f.Parse(rest); err != nil {
			return nil, err
		}
		if f.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, f.Arg(0))
		rest = f.Args()[1:]
	}
}
