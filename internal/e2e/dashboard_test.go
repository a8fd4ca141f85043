package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/govfs/govfs/internal/testcluster"
)

// TestDashboardInBrowser drives the dashboard in a real browser
// (Debian's chromium, which make test installs when missing; skipped
// without it): the page loads and shows the cluster's metadata nodes and
// chunk servers, shows a chunk server killed with SIGKILL as late or dead
// within seconds, and then its replica group repaired by the spare
// server, with no console error. A screenshot (PNG) of the end is saved to
// test-artifacts/dashboard.png.
func TestDashboardInBrowser(t *testing.T) {
	browser := ""
	for _, b := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(b); err == nil {
			browser = p
			break
		}
	}
	if browser == "" {
		t.Skip("no chromium: make test installs Debian's chromium package")
	}
	c := testcluster.StartForTest(t, 90*time.Second, testcluster.ProcConfig{Binary: binary, Dir: t.TempDir(), Nodes: 3, Chunks: 4,
		Tick: 50 * time.Millisecond, HTTP: true, ChunkArgs: []string{"--chunk-size", "1048576"}})
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cl := newClient(t, c, c.Addrs(), 30*time.Second)
	data := make([]byte, 3<<20)
	_, _ = rand.Read(data)
	if _, err := cl.WriteFile(ctx, "/before-the-kill", bytes.NewReader(data), 0o644); err != nil {
		t.Fatal(err)
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true), chromedp.WindowSize(1400, 1100))
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	var mu sync.Mutex
	var consoleErrors []string
	err := chromedp.Listen(bctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError {
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value)+a.Description)
				}
				consoleErrors = append(consoleErrors, strings.Join(args, " "))
			}
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			consoleErrors = append(consoleErrors, msg)
		}
	})
	if err != nil {
		t.Fatalf("start %s: %v", browser, err)
	}
	url := "http://" + c.HTTPAddrs()[0] + "/"
	if err := chromedp.Do(bctx, chromedp.Navigate(url),
		chromedp.WaitVisible(`#chunk-servers tr:nth-child(5)`)); err != nil { // a header and four servers
		t.Fatalf("load %s: %v", url, err)
	}
	nodes, err1 := chromedp.Run(bctx, chromedp.Text(`#nodes`))
	chunks, err2 := chromedp.Run(bctx, chromedp.Text(`#chunk-servers`))
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	for _, a := range c.Addrs() {
		if !strings.Contains(nodes, a) {
			t.Errorf("the metadata nodes table lacks %s:\n%s", a, nodes)
		}
	}
	for _, a := range c.ChunkAddrs() {
		if !strings.Contains(chunks, a) {
			t.Errorf("the chunk servers table lacks %s:\n%s", a, chunks)
		}
	}

	// A member of the replica group dies.
	info, err := cl.ClusterMap(ctx)
	if err != nil || len(info.GetReplicaGroups()) == 0 {
		t.Fatalf("replica groups: %v %v", info, err)
	}
	g := info.GetReplicaGroups()[0]
	victim := g.GetMembers()[1]
	victimAddr, victimIdx := "", -1
	for _, s := range info.GetChunkServers() {
		if s.GetId() == victim {
			victimAddr = s.GetAddr()
		}
	}
	for i, a := range c.ChunkAddrs() {
		if a == victimAddr {
			victimIdx = 3 + i // processes: the metadata nodes, then the chunk servers
		}
	}
	if victimIdx < 0 {
		t.Fatalf("chunk server %d (%s) is not one of this cluster's processes", victim, victimAddr)
	}
	killed := time.Now()
	c.Kill(victimIdx)
	rowState := fmt.Sprintf(`(() => { for (const tr of document.querySelectorAll("#chunk-servers tr")) {
		if (tr.children.length > 4 && tr.children[1].textContent === %q) return tr.children[4].textContent; } return ""; })()`, victimAddr)
	waitFor := func(what string, limit time.Duration, ok func() (bool, string)) {
		t.Helper()
		deadline := time.Now().Add(limit)
		for {
			done, last := ok()
			if done {
				t.Logf("%s after %.1f s", what, time.Since(killed).Seconds())
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %v (last seen: %s)", what, limit, last)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	waitFor("the dashboard shows the killed chunk server late or dead", 20*time.Second, func() (bool, string) {
		st, err := chromedp.Run(bctx, chromedp.Evaluate[string](rowState))
		if err != nil {
			return false, err.Error()
		}
		return st == "late" || st == "dead", st
	})
	groupState := fmt.Sprintf(`(() => { for (const tr of document.querySelectorAll("#replica-groups tr")) {
		if (tr.children.length > 4 && tr.children[0].textContent === "%d") return tr.children[1].textContent + " " + tr.children[4].textContent; } return ""; })()`, g.GetId())
	waitFor("the dashboard shows the replica group whole again without the dead server", 60*time.Second, func() (bool, string) {
		st, err := chromedp.Run(bctx, chromedp.Evaluate[string](groupState))
		if err != nil || st == "" {
			return false, fmt.Sprint(st, err)
		}
		return strings.HasSuffix(st, " ok") && !strings.Contains(strings.Fields(st)[0], fmt.Sprint(victim)), st
	})
	health, err := chromedp.Run(bctx, chromedp.Text(`#health`))
	if err != nil {
		t.Fatal(err)
	}
	shot, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(health, "dead") {
		t.Errorf("the health line does not mention the dead server: %q", health)
	}
	events, err := chromedp.Run(bctx, chromedp.Text(`#events`))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"chunk server stopped sending heartbeats: dead", "replica group membership changed"} {
		if !strings.Contains(events, want) {
			t.Errorf("recent events lack %q:\n%s", want, events)
		}
	}
	art := filepath.Join("..", "..", "test-artifacts")
	if err := os.MkdirAll(art, 0o755); err == nil {
		if err := os.WriteFile(filepath.Join(art, "dashboard.png"), shot, 0o644); err != nil {
			t.Logf("screenshot not saved: %v", err)
		}
	}
	mu.Lock()
	if len(consoleErrors) > 0 {
		t.Errorf("console errors: %q", consoleErrors)
	}
	mu.Unlock()

	// The acknowledged file is whole.
	var buf bytes.Buffer
	if _, err := cl.ReadFile(ctx, "/before-the-kill", &buf); err != nil || !bytes.Equal(buf.Bytes(), data) {
		t.Fatalf("the file written before the kill: %v", err)
	}
}
