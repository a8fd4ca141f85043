package cli

import (
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// sizeUnits are the suffixes a size flag accepts: powers of 1024 with
// or without the "i" (as dd, fio and Kubernetes readers expect both; the
// decimal SI meaning is given by kB, MB, GB, TB), and B for bytes.
var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"t", 1 << 40},
	{"b", 1},
}

// parseSize reads a byte count: 1048576, 256MiB, 1G (= 1 GiB), 1.5GiB,
// 10MB (= 10,000,000).
func parseSize(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := int64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	if n, err := strconv.ParseInt(t, 10, 64); err == nil {
		if n < 0 || (n > 0 && mult > math.MaxInt64/n) {
			return 0, fmt.Errorf("size %q is out of range", s)
		}
		return n * mult, nil
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || t == "" || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("size %q: give bytes or a number with a unit (e.g. 1048576, 256MiB, 1G, 10MB)", s)
	}
	v := f * float64(mult)
	if v < 0 || v >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q is out of range", s)
	}
	return int64(v), nil
}

// formatSize prints n in the largest binary unit that keeps it readable.
func formatSize(n int64) string {
	switch {
	case n >= 1<<40 && n%(1<<30) == 0:
		return fmt.Sprintf("%gTiB", float64(n)/(1<<40))
	case n >= 1<<30:
		return strconv.FormatFloat(float64(n)/(1<<30), 'f', -1, 64) + "GiB"
	case n >= 1<<20:
		return strconv.FormatFloat(float64(n)/(1<<20), 'f', -1, 64) + "MiB"
	case n >= 1<<10:
		return strconv.FormatFloat(float64(n)/(1<<10), 'f', -1, 64) + "KiB"
	}
	return strconv.FormatInt(n, 10)
}

// humanSize prints n for people: one decimal in the largest binary unit
// under it ("182.3 GiB"), bytes below 1 KiB.
func humanSize(n int64) string {
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	if n < 1<<10 {
		return strconv.FormatInt(n, 10) + " B"
	}
	v, i := float64(n)/(1<<10), 0
	for v >= 1<<10 && i < len(units)-1 {
		v /= 1 << 10
		i++
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + " " + units[i]
}

// sizeFlag is a flag.Value for a byte count given with or without a unit.
type sizeFlag struct{ p *int64 }

func (s sizeFlag) String() string {
	if s.p == nil {
		return "0"
	}
	return formatSize(*s.p)
}

func (s sizeFlag) Set(v string) error {
	n, err := parseSize(v)
	if err != nil {
		return err
	}
	*s.p = n
	return nil
}

// sizeVar defines a size flag (bytes, or a number with a unit).
func sizeVar(f *flag.FlagSet, p *int64, name string, value int64, usage string) {
	*p = value
	f.Var(sizeFlag{p}, name, usage+" (bytes, or with a unit: 256MiB, 1G, 10MB)")
}

// sizeFlagInt64 is sizeVar returning the pointer, like f.Int64.
func sizeFlagInt64(f *flag.FlagSet, name string, value int64, usage string) *int64 {
	p := new(int64)
	sizeVar(f, p, name, value, usage)
	return p
}
