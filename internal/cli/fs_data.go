package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
)

// appendRecord is the largest record `fs append` sends (less when the
// cluster's chunks are small: client.MaxRecord).
const appendRecord = 1 << 20

// openLocal opens a local file to read, or stdin for "-"; size is -1
// when unknown.
func openLocal(local string) (in io.Reader, size int64, closeFn func(), err error) {
	if local == "-" {
		return os.Stdin, -1, func() {}, nil
	}
	f, err := os.Open(local)
	if err != nil {
		return nil, 0, nil, err
	}
	size = -1
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
		size = fi.Size()
	}
	return f, size, func() { f.Close() }, nil
}

// put copies a local file (or stdin for "-") to remote.
func (r *fsRunner) put(ctx context.Context, local, remote string, verify bool) error {
	in, size, closeIn, err := openLocal(local)
	if err != nil {
		return fmt.Errorf("fs put: %w", err)
	}
	defer closeIn()
	var sum hash.Hash = sha256.New()
	bar := startProgress(r.progress, "put "+remote, size)
	n, err := r.cl.WriteFile(ctx, remote, io.TeeReader(in, io.MultiWriter(sum, bar.counter())), 0o644)
	bar.Finish()
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
	var size int64 = -1
	if r.progress != nil {
		if a, err := r.cl.Stat(ctx, remote); err == nil {
			size = int64(a.GetSize())
		}
	}
	bar := startProgress(r.progress, "get "+remote, size)
	if local == "-" {
		n, err := r.cl.ReadFile(ctx, remote, io.MultiWriter(r.out, sum, bar.counter()))
		bar.Finish()
		if err != nil {
			return r.fail(remote, err)
		}
		if verify {
			fmt.Fprintf(os.Stderr, "%s  %s (%d bytes)\n", hex.EncodeToString(sum.Sum(nil)), remote, n)
		}
		return nil
	}
	local, err := getTarget(remote, local)
	if err != nil {
		bar.Finish()
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(local), "."+filepath.Base(local)+".govfs-*")
	if err != nil {
		bar.Finish()
		return fmt.Errorf("fs get: cannot write beside %s: %w", local, errors.Unwrap(err))
	}
	n, err := r.cl.ReadFile(ctx, remote, io.MultiWriter(tmp, sum, bar.counter()))
	bar.Finish()
	var localErr error // a failure on this machine, not of the cluster
	if err == nil {
		localErr = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil && localErr == nil {
		localErr = cerr
	}
	if err == nil && localErr == nil {
		if rerr := os.Rename(tmp.Name(), local); rerr != nil {
			localErr = errors.Unwrap(rerr)
		}
	}
	if err != nil || localErr != nil {
		os.Remove(tmp.Name())
		if localErr != nil {
			return fmt.Errorf("fs get: write %s: %w (nothing was left there)", local, localErr)
		}
		return r.fail(remote, err)
	}
	if verify {
		fmt.Fprintf(r.out, "%s  %s (%d bytes)\n", hex.EncodeToString(sum.Sum(nil)), local, n)
	}
	return nil
}

// getTarget is where fs get writes remote: into local when it is an
// existing directory (as cp does), else local itself, whose directory
// must exist. Checked before anything is downloaded.
func getTarget(remote, local string) (string, error) {
	if st, err := os.Stat(local); err == nil && st.IsDir() {
		name := path.Base(remote)
		if name == "/" || name == "." {
			return "", fmt.Errorf("fs get: %s is a directory and %s has no file name to write into it", local, remote)
		}
		local = filepath.Join(local, name)
		if st, err := os.Stat(local); err == nil && st.IsDir() {
			return "", fmt.Errorf("fs get: %s is a directory; give a file name", local)
		}
		return local, nil
	}
	if strings.HasSuffix(local, string(filepath.Separator)) {
		return "", fmt.Errorf("fs get: directory %s does not exist", local)
	}
	dir := filepath.Dir(local)
	if st, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("fs get: directory %s of %s does not exist", dir, local)
	} else if !st.IsDir() {
		return "", fmt.Errorf("fs get: %s is not a directory", dir)
	}
	return local, nil
}

// appendFile appends a local file (or stdin for "-") to remote, creating
// it if needed, as records of up to 1 MiB (client.File.Append: each lands
// whole, in order, but not necessarily right after the previous one: a
// record that does not fit in the rest of a chunk goes to the next, and
// other appenders' records may come between). It prints the offset of
// the first record (nothing for empty input).
func (r *fsRunner) appendFile(ctx context.Context, local, remote string, verify bool) error {
	in, size, closeIn, err := openLocal(local)
	if err != nil {
		return fmt.Errorf("fs append: %w", err)
	}
	defer closeIn()
	f, err := r.cl.Open(ctx, remote, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_APPEND, 0o644)
	if err != nil {
		return r.fail(remote, err)
	}
	defer f.Close()
	maxRec, err := r.cl.MaxRecord(ctx)
	if err != nil {
		return r.fail(remote, err)
	}
	sum := sha256.New()
	bar := startProgress(r.progress, "append "+remote, size)
	defer bar.Finish()
	buf := make([]byte, min(appendRecord, maxRec))
	var total, firstOff, next int64
	records, gaps := 0, false
	for {
		n, rerr := io.ReadFull(in, buf)
		if n > 0 {
			off, err := f.Append(ctx, buf[:n])
			if err != nil {
				return r.fail(remote, fmt.Errorf("after %d bytes: %w", total, err))
			}
			if records == 0 {
				fmt.Fprintln(r.out, off)
				firstOff = off
			} else if off != next {
				gaps = true
			}
			records++
			next = off + int64(n)
			sum.Write(buf[:n])
			total += int64(n)
			bar.add(int64(n))
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return fmt.Errorf("fs append: read %s: %w", local, rerr)
		}
	}
	if verify {
		fmt.Fprintf(r.out, "%s  %s (%d bytes)\n", hex.EncodeToString(sum.Sum(nil)), remote, total)
	}
	// Say what became of input larger than one record: appends are
	// atomic per record, not per file.
	switch {
	case records > 1 && gaps:
		fmt.Fprintf(r.errOut, "fs append: %s went in as %d records of up to %s, each whole, from offset %d; they are not contiguous: a record that did not fit in the rest of a chunk went to the next one (the rest reads as zeros), or another appender's records came between. To copy a file byte for byte, use fs put.\n",
			local, records, humanSize(int64(len(buf))), firstOff)
	case records > 1:
		fmt.Fprintf(r.errOut, "fs append: %s went in as %d records of up to %s, contiguous from offset %d to %d (each record is atomic; the whole file is not: another appender's record could have come between).\n",
			local, records, humanSize(int64(len(buf))), firstOff, next)
	}
	return nil
}
