package e2e

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/govfs/govfs/internal/fusefs"
)

// TestDeployThreeHosts brings up the three-machine cluster of
// docs/deploy.md in network namespaces, each "host" with its own address
// (10.0.0.1-3 on a bridge of their own, a client at 10.0.0.10), using
// the guide's files as they are: deploy/examples/issue-certs.sh for the
// certificates, and the ExecStart lines of deploy/systemd/*.service with
// the variables of deploy/examples/*.env (only the file-system roots
// /usr/local/bin, /etc/govfs and /var/lib/govfs are moved into the test's
// directory). Then it uses the mount on the client: files written,
// listed, renamed, read back and removed. Root only (network
// namespaces); skipped otherwise.
func TestDeployThreeHosts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the three hosts are network namespaces")
	}
	for _, bin := range []string{"ip", "nsenter"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("needs %s: %v", bin, err)
		}
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no /dev/fuse: %v", err)
	}
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()

	// Certificates, with the guide's script.
	certs := exec.Command("sh", filepath.Join(repo, "deploy", "examples", "issue-certs.sh"))
	certs.Env = append(os.Environ(), "GOVFS="+binary, "CA="+filepath.Join(base, "ca"), "OUT="+filepath.Join(base, "out"))
	if out, err := certs.CombinedOutput(); err != nil {
		t.Fatalf("issue-certs.sh: %v\n%s", err, out)
	}

	// The network: a switch namespace with a bridge, a veth from each
	// host to it. Names are unique to this run; everything is removed at
	// the end.
	tag := fmt.Sprintf("gv%d", os.Getpid()%100000)
	sw := tag + "sw"
	hosts := []string{tag + "h1", tag + "h2", tag + "h3", tag + "cl"}
	addrs := []string{"10.0.0.1/24", "10.0.0.2/24", "10.0.0.3/24", "10.0.0.10/24"}
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	t.Cleanup(func() {
		for _, ns := range append([]string{sw}, hosts...) {
			_ = exec.Command("ip", "netns", "del", ns).Run()
		}
	})
	ip("netns", "add", sw)
	ip("-n", sw, "link", "add", "br0", "type", "bridge")
	ip("-n", sw, "link", "set", "br0", "up")
	for i, ns := range hosts {
		ip("netns", "add", ns)
		ip("-n", ns, "link", "set", "lo", "up")
		peer := fmt.Sprintf("p%d", i)
		ip("link", "add", tag+peer, "type", "veth", "peer", "name", tag+"e")
		ip("link", "set", tag+peer, "netns", sw)
		ip("link", "set", tag+"e", "netns", ns)
		ip("-n", ns, "link", "set", tag+"e", "name", "eth0")
		ip("-n", ns, "addr", "add", addrs[i], "dev", "eth0")
		ip("-n", ns, "link", "set", "eth0", "up")
		ip("-n", sw, "link", "set", tag+peer, "master", "br0")
		ip("-n", sw, "link", "set", tag+peer, "up")
	}

	// The hosts' services: each unit's ExecStart with its host's
	// environment file, in its namespace.
	var procs []*exec.Cmd
	t.Cleanup(func() {
		for _, p := range procs {
			_ = p.Process.Signal(syscall.SIGTERM)
		}
		for _, p := range procs {
			done := make(chan struct{})
			go func() { _ = p.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				_ = p.Process.Kill()
				<-done
			}
		}
	})
	start := func(ns, unit, envFile, root, tlsDir string) *exec.Cmd {
		t.Helper()
		line := execStart(t, filepath.Join(repo, "deploy", "systemd", unit), readEnv(t, filepath.Join(repo, "deploy", "examples", envFile)))
		line = strings.ReplaceAll(line, "/usr/local/bin/govfs", binary)
		line = strings.ReplaceAll(line, "/etc/govfs/tls", tlsDir)
		line = strings.ReplaceAll(line, "/var/lib/govfs", filepath.Join(root, "var", "lib", "govfs"))
		line = strings.ReplaceAll(line, "/mnt/govfs", filepath.Join(root, "mnt", "govfs"))
		for _, d := range []string{filepath.Join(root, "var", "lib", "govfs"), filepath.Join(root, "mnt", "govfs")} {
			if err := os.MkdirAll(d, 0o700); err != nil {
				t.Fatal(err)
			}
		}
		logf, err := os.Create(filepath.Join(root, strings.TrimSuffix(unit, ".service")+".log"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			logf.Close()
			if t.Failed() {
				b, _ := os.ReadFile(logf.Name())
				t.Logf("%s on %s:\n%s", unit, ns, tail(b, 3000))
			}
		})
		// Each host its own network and host name (chunk servers place
		// replicas on distinct host names), as separate machines have.
		host := strings.TrimPrefix(ns, tag)
		args := append([]string{"--net=/run/netns/" + ns, "--", "unshare", "--uts", "--", "sh", "-c", `hostname "$0" && exec "$@"`, host},
			strings.Fields(line)...)
		cmd := exec.Command("nsenter", args...)
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, cmd)
		return cmd
	}
	for i := 1; i <= 3; i++ {
		root := filepath.Join(base, fmt.Sprintf("host%d", i))
		tlsDir := filepath.Join(base, "out", fmt.Sprintf("host%d", i), "tls")
		start(hosts[i-1], "govfs-meta.service", fmt.Sprintf("host%d.env", i), root, tlsDir)
	}
	for i := 1; i <= 3; i++ {
		root := filepath.Join(base, fmt.Sprintf("host%d", i))
		tlsDir := filepath.Join(base, "out", fmt.Sprintf("host%d", i), "tls")
		start(hosts[i-1], "govfs-chunk.service", fmt.Sprintf("host%d.env", i), root, tlsDir)
	}

	// From the client host: the admin status, as an operator would check.
	clientRoot := filepath.Join(base, "client")
	clientTLS := filepath.Join(base, "out", "client", "tls")
	meta := readEnv(t, filepath.Join(repo, "deploy", "examples", "client.env"))["GOVFS_META"]
	var status string
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		out, err := exec.Command("nsenter", "--net=/run/netns/"+hosts[3], "--", binary, "admin", "status",
			"--meta", meta, "--tls", filepath.Join(clientTLS, "admin")).CombinedOutput()
		status = string(out)
		if err == nil && strings.Count(status, " ok") >= 1 && strings.Contains(status, "node/meta3") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cluster did not form: %v\n%s", err, status)
		}
	}
	start(hosts[3], "govfs-mount.service", "client.env", clientRoot, clientTLS)
	mnt := filepath.Join(clientRoot, "mnt", "govfs")
	t.Cleanup(func() {
		if err := fusefs.Unmount(mnt, false); err != nil {
			_ = fusefs.Unmount(mnt, true)
		}
	})
	for deadline := time.Now().Add(30 * time.Second); !fusefs.IsMounted(mnt); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s was not mounted", mnt)
		}
	}

	// The mount at work (the client's kernel talks to the mount process,
	// which talks to the hosts over their network).
	data := make([]byte, 5<<20+123)
	_, _ = rand.Read(data)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(mnt, "projects", "a"), 0o755))
	must(os.WriteFile(filepath.Join(mnt, "projects", "a", "big.bin"), data, 0o644))
	for i := range 20 {
		must(os.WriteFile(filepath.Join(mnt, "projects", fmt.Sprintf("small%02d", i)), []byte(fmt.Sprint(i)), 0o644))
	}
	must(os.Rename(filepath.Join(mnt, "projects", "a"), filepath.Join(mnt, "projects", "b")))
	got, err := os.ReadFile(filepath.Join(mnt, "projects", "b", "big.bin"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("big.bin read back through the mount: %v (equal %v)", err, bytes.Equal(got, data))
	}
	ents, err := os.ReadDir(filepath.Join(mnt, "projects"))
	if err != nil || len(ents) != 21 {
		t.Fatalf("projects lists %d entries (%v), want 21", len(ents), err)
	}
	must(os.Remove(filepath.Join(mnt, "projects", "small07")))
	if _, err := os.Stat(filepath.Join(mnt, "projects", "small07")); !os.IsNotExist(err) {
		t.Fatalf("small07 after its removal: %v", err)
	}
	// The same bytes from the operators' side, with govfs fs over the
	// network.
	out, err := exec.Command("nsenter", "--net=/run/netns/"+hosts[3], "--", binary, "fs", "--meta", meta,
		"--tls", filepath.Join(clientTLS, "admin"), "cat", "/projects/b/big.bin").Output()
	if err != nil || !bytes.Equal(out, data) {
		t.Fatalf("govfs fs cat: %v (%d bytes)", err, len(out))
	}
}

// execStart reads a unit's ExecStart line and expands ${VAR} from env as
// systemd does.
func execStart(t *testing.T, unit string, env map[string]string) string {
	t.Helper()
	f, err := os.Open(unit)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "ExecStart="); ok {
			return regexp.MustCompile(`\$\{([A-Z_]+)\}`).ReplaceAllStringFunc(rest, func(v string) string {
				name := v[2 : len(v)-1]
				val, ok := env[name]
				if !ok {
					t.Fatalf("%s uses %s, which the environment file does not set", unit, v)
				}
				return val
			})
		}
	}
	t.Fatalf("%s has no ExecStart", unit)
	return ""
}

// readEnv reads a systemd EnvironmentFile (KEY=VALUE lines, # comments).
func readEnv(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: bad line %q", path, line)
		}
		env[k] = v
	}
	return env
}
