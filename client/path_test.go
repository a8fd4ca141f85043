package client

import (
	"errors"
	"slices"
	"strings"
	"syscall"
	"testing"
)

func TestSplitPath(t *testing.T) {
	long := strings.Repeat("a", MaxNameLen)
	tests := []struct {
		in   string
		want []string
		err  error
	}{
		{"/", nil, nil},
		{"//", nil, nil},
		{"/a", []string{"a"}, nil},
		{"/a/b/c", []string{"a", "b", "c"}, nil},
		{"/a//b/", []string{"a", "b"}, nil},
		{"/a/./b", []string{"a", "b"}, nil},
		{"/a/../b", []string{"b"}, nil},
		{"/..", nil, nil},
		{"/../a", []string{"a"}, nil},
		{"/" + long, []string{long}, nil},
		{"", nil, syscall.EINVAL},
		{"a/b", nil, syscall.EINVAL},
		{"./a", nil, syscall.EINVAL},
		{"/a\x00b", nil, syscall.EINVAL},
		{"/" + long + "a", nil, syscall.ENAMETOOLONG},
		{"/" + strings.Repeat("a/", MaxPathLen/2), nil, syscall.ENAMETOOLONG},
	}
	for _, tt := range tests {
		got, err := splitPath(tt.in)
		if !errors.Is(err, tt.err) || (tt.err == nil && err != nil) {
			t.Errorf("splitPath(%.20q) error = %v, want %v", tt.in, err, tt.err)
			continue
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("splitPath(%.20q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestSplitPathMaxLen(t *testing.T) {
	// Exactly MaxPathLen bytes is accepted.
	p := "/" + strings.Repeat(strings.Repeat("a", 99)+"/", 40)
	p += strings.Repeat("b", MaxPathLen-len(p))
	if len(p) != MaxPathLen {
		t.Fatalf("test path has %d bytes", len(p))
	}
	if _, err := splitPath(p); err != nil {
		t.Fatalf("splitPath(%d bytes) = %v, want ok", len(p), err)
	}
	if _, err := splitPath(p + "b"); !errors.Is(err, syscall.ENAMETOOLONG) {
		t.Fatalf("splitPath(%d bytes) = %v, want ENAMETOOLONG", len(p)+1, err)
	}
}

func TestSplitParent(t *testing.T) {
	dir, name, err := splitParent("/a/b/c", syscall.EEXIST)
	if err != nil || !slices.Equal(dir, []string{"a", "b"}) || name != "c" {
		t.Fatalf("splitParent(/a/b/c) = %q, %q, %v", dir, name, err)
	}
	dir, name, err = splitParent("/x", syscall.EEXIST)
	if err != nil || len(dir) != 0 || name != "x" {
		t.Fatalf("splitParent(/x) = %q, %q, %v", dir, name, err)
	}
	if _, _, err := splitParent("/", syscall.EBUSY); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("splitParent(/) error = %v, want EBUSY", err)
	}
	if _, _, err := splitParent("rel", syscall.EBUSY); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("splitParent(rel) error = %v, want EINVAL", err)
	}
}

func TestCheckName(t *testing.T) {
	ok := []string{"a", "...", "a b", strings.Repeat("x", MaxNameLen)}
	for _, n := range ok {
		if err := checkName(n); err != nil {
			t.Errorf("checkName(%.20q) = %v, want nil", n, err)
		}
	}
	bad := map[string]error{
		"":                                syscall.EINVAL,
		".":                               syscall.EINVAL,
		"..":                              syscall.EINVAL,
		"a/b":                             syscall.EINVAL,
		"a\x00":                           syscall.EINVAL,
		strings.Repeat("x", MaxNameLen+1): syscall.ENAMETOOLONG,
	}
	for n, want := range bad {
		if err := checkName(n); !errors.Is(err, want) {
			t.Errorf("checkName(%.20q) = %v, want %v", n, err, want)
		}
	}
}

// A relative path says what is wrong, not only EINVAL.
func TestRelativePathSaysWhy(t *testing.T) {
	_, err := splitPath("data/x")
	if !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "paths must be absolute") {
		t.Fatalf("relative path: %v", err)
	}
}
