package cli

import "testing"

func TestUnescapeMountinfo(t *testing.T) {
	for in, want := range map[string]string{
		`/mnt/plain`:            "/mnt/plain",
		`/mnt/with\040space`:    "/mnt/with space",
		`/mnt/tab\011and\134bs`: "/mnt/tab\tand\\bs",
		`/mnt/bad\09`:           `/mnt/bad\09`,
		`/mnt/end\04`:           `/mnt/end\04`,
	} {
		if got := unescapeMountinfo(in); got != want {
			t.Errorf("unescapeMountinfo(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestMountLogFileNeedsBackground(t *testing.T) {
	if _, err := parseMount([]string{"--log-file", "/tmp/x.log", "/mnt"}, discard{}); err == nil {
		t.Fatal("--log-file without --background accepted")
	}
	inv, err := parseMount([]string{"--background", "--log-file", "/tmp/x.log", "/mnt"}, discard{})
	if err != nil || !inv.background || inv.logFile != "/tmp/x.log" || inv.dir != "/mnt" {
		t.Fatalf("parse: %+v %v", inv, err)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
