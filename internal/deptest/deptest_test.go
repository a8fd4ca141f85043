// Package deptest enforces the dependency direction of CONVENTIONS §1:
// pure state machines import no I/O, multiraft knows no state machine,
// the client imports no server package.
package deptest

import (
	"os/exec"
	"strings"
	"testing"
)

// deps lists the packages pkg depends on: its own imports for standard
// library and third-party packages (the pure cores may reach the network
// indirectly through generated gRPC stubs, never by themselves), and every
// transitive GovFS package.
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	direct, err := exec.Command("go", "list", "-f", "{{join .Imports \" \"}}", "github.com/govfs/govfs/"+pkg).Output()
	if err != nil {
		t.Fatalf("go list %s: %v", pkg, err)
	}
	out, err := exec.Command("go", "list", "-deps", "github.com/govfs/govfs/"+pkg).Output()
	if err != nil {
		t.Fatalf("go list %s: %v", pkg, err)
	}
	var res []string
	for _, d := range strings.Fields(string(out)) {
		if strings.HasPrefix(d, "github.com/govfs/govfs/") {
			res = append(res, d)
		}
	}
	return append(res, strings.Fields(string(direct))...)
}

func TestDependencyDirection(t *testing.T) {
	const mod = "github.com/govfs/govfs/"
	rules := []struct {
		pkg       string
		forbidden []string
	}{
		{"internal/namespace", []string{"net", "os", mod + "internal/rpc", mod + "internal/multiraft", "google.golang.org/grpc", "time"}},
		{"internal/clustermap", []string{"net", "os", mod + "internal/rpc", mod + "internal/multiraft", "google.golang.org/grpc", "time"}},
		{"internal/chunkstore", []string{"net", mod + "internal/rpc", mod + "internal/multiraft", mod + "internal/namespace", "google.golang.org/grpc"}},
		{"internal/placement", []string{"net", "os", "time", "math/rand", mod + "internal/rpc", mod + "internal/multiraft"}},
		{"internal/lease", []string{"net", "os", mod + "internal/rpc", mod + "internal/multiraft", mod + "internal/wire", "google.golang.org/grpc"}},
		{"internal/multiraft", []string{mod + "internal/namespace", mod + "internal/clustermap", mod + "internal/metanode"}},
		{"client", []string{mod + "internal/metanode", mod + "internal/multiraft", mod + "internal/namespace", mod + "internal/engine", mod + "internal/rpc"}},
		{"internal/engine", []string{mod + "internal/multiraft", mod + "internal/namespace"}},
		// The permission rules are pure: the ministry and the mount share them.
		{"internal/posix", []string{"net", "os", "time", mod + "internal/rpc", mod + "internal/engine", "google.golang.org/grpc"}},
		// The mount's disk cache knows files by inode only: no cluster
		// code, no network.
		{"internal/diskcache", []string{"net", "google.golang.org/grpc", mod + "client", mod + "internal/wire", mod + "internal/rpc"}},
	}
	for _, r := range rules {
		have := map[string]bool{}
		for _, d := range deps(t, r.pkg) {
			have[d] = true
		}
		for _, f := range r.forbidden {
			if have[f] {
				t.Errorf("%s must not import %s (CONVENTIONS §1)", r.pkg, f)
			}
		}
	}
}
