package client

import (
	"fmt"
	"path"
	"strings"
	"syscall"
)

// Limits on names and paths, as on Linux.
const (
	// MaxPathLen is the longest path accepted, in bytes.
	MaxPathLen = 4096
	// MaxNameLen is the longest path component accepted, in bytes.
	MaxNameLen = 255
)

// splitPath validates an absolute path and returns its components after
// lexical cleaning ("/" gives none). Errors wrap an errno with what is
// wrong: EINVAL for an empty or relative path or one containing NUL,
// ENAMETOOLONG for a path over MaxPathLen or a component over MaxNameLen.
func splitPath(p string) ([]string, error) {
	if p == "" {
		return nil, fmt.Errorf("%w (an empty path; paths are absolute, from the cluster's root /)", syscall.EINVAL)
	}
	if p[0] != '/' {
		return nil, fmt.Errorf("%w (paths must be absolute: start with /, the cluster's root)", syscall.EINVAL)
	}
	if len(p) > MaxPathLen {
		return nil, fmt.Errorf("%w (the path is %d bytes, at most %d are allowed)", syscall.ENAMETOOLONG, len(p), MaxPathLen)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return nil, fmt.Errorf("%w (the path contains a NUL byte)", syscall.EINVAL)
	}
	clean := path.Clean(p)
	if clean == "/" {
		return nil, nil
	}
	comps := strings.Split(clean[1:], "/")
	for _, c := range comps {
		if len(c) > MaxNameLen {
			return nil, syscall.ENAMETOOLONG
		}
	}
	return comps, nil
}

// splitParent validates p and returns the components of its parent and
// its last name. For "/" (which has no name in a parent) it returns
// rootErr.
func splitParent(p string, rootErr syscall.Errno) (dir []string, name string, err error) {
	comps, err := splitPath(p)
	if err != nil {
		return nil, "", err
	}
	if len(comps) == 0 {
		return nil, "", rootErr
	}
	return comps[:len(comps)-1], comps[len(comps)-1], nil
}

// checkName validates one directory entry name as used by the inode-level
// calls: not empty, not "." or "..", no '/' or NUL, at most MaxNameLen.
func checkName(name string) error {
	switch {
	case name == "" || name == "." || name == "..":
		return syscall.EINVAL
	case len(name) > MaxNameLen:
		return syscall.ENAMETOOLONG
	case strings.ContainsAny(name, "/\x00"):
		return syscall.EINVAL
	}
	return nil
}
