package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
)

// put copies a local file (or stdin for "-") to remote.
func (r *fsRunner) put(ctx context.Context, local, remote string, verify bool) error {
	var in io.Reader = os.Stdin
	if local != "-" {
		f, err := os.Open(local)
		if err != nil {
			return fmt.Errorf("fs put: %w", err)
		}
		defer f.Close()
		in = f
	}
	var sum hash.Hash = sha256.New()
	n, err := r.cl.WriteFile(ctx, remote, io.TeeReader(in, sum), 0o644)
	if err != nil {
		return r.fail(remote, err)
	}
	if verify {
		fmt.Fprintf(r.out, "%s  %s (%d bytes)\n", hex.EncodeToString(sum.Sum(nil)), remote, n)
	}
	return nil
}

// get copies remote to a local file (or stdout for "-"). The local file is
// written to a temporary name and renamed into place only when complete.
func (r *fsRunner) get(ctx context.Context, remote, local string, verify bool) error {
	sum := sha256.New()
	if local == "-" {
		n, err := r.cl.ReadFile(ctx, remote, io.MultiWriter(r.out, sum))
		if err != nil {
			return r.fail(remote, err)
		}
		if verify {
			fmt.Fprintf(os.Stderr, "%s  %s (%d bytes)\n", hex.EncodeToString(sum.Sum(nil)), remote, n)
		}
		return nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(local), "."+filepath.Base(local)+".govfs-*")
	if err != nil {
		return fmt.Errorf("fs get: %w", err)
	}
	n, err := r.cl.ReadFile(ctx, remote, io.MultiWriter(tmp, sum))
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), local)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return r.fail(remote, err)
	}
	if verify {
		fmt.Fprintf(r.out, "%s  %s (%d bytes)\n", hex.EncodeToString(sum.Sum(nil)), local, n)
	}
	return nil
}
