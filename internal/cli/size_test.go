package cli

import "testing"

func TestParseSize(t *testing.T) {
	good := map[string]int64{
		"1048576": 1 << 20, "256MiB": 256 << 20, "256mib": 256 << 20, "1G": 1 << 30, "1GiB": 1 << 30,
		"1.5GiB": 3 << 29, "10MB": 10_000_000, "4k": 4096, "0": 0, "512B": 512, " 2 MiB ": 2 << 20,
	}
	for in, want := range good {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "-1", "-1MiB", "12x", "1e400", "NaN", "9999999999TiB", "1.2.3G"} {
		if got, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", in, got)
		}
	}
	if s := formatSize(256 << 20); s != "256MiB" {
		t.Errorf("formatSize = %q", s)
	}
}

func TestHumanSize(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 195_000_000_000: "181.6 GiB", 1 << 50: "1.0 PiB"} {
		if got := humanSize(n); got != want {
			t.Errorf("humanSize(%d) = %q, want %q", n, got, want)
		}
	}
}
