package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"
)

// RunLocalMeta runs the meta workload's phases, with the same number of
// workers and files, against a local directory: the baseline that govfs
// bench meta reports its ratios against, measured in the same run because
// these machines are shared and noisy. readdir lists and stats every
// entry, as GovFS readdir returns attributes (readdirplus). Nothing is
// fsync'd locally, as local file systems do not sync metadata operations;
// GovFS makes every operation durable on 3 replicas.
func RunLocalMeta(ctx context.Context, cfg MetaConfig, dir string) ([]PhaseResult, error) {
	if cfg.Clients <= 0 {
		cfg.Clients = DefaultClients
	}
	if cfg.Files <= 0 {
		cfg.Files = DefaultFiles
	}
	if len(cfg.Phases) == 0 {
		cfg.Phases = MetaPhases
	}
	top, err := os.MkdirTemp(dir, "govfs-bench-local-")
	if err != nil {
		return nil, fmt.Errorf("bench: local baseline: %w", err)
	}
	defer os.RemoveAll(top)
	wdirs := make([]string, cfg.Clients)
	for k := range wdirs {
		wdirs[k] = filepath.Join(top, "w"+strconv.Itoa(k))
		if err := os.Mkdir(wdirs[k], 0o755); err != nil {
			return nil, fmt.Errorf("bench: local baseline: %w", err)
		}
	}
	want := func(p string) bool { return slices.Contains(cfg.Phases, p) }
	needFiles := want(PhaseStat) || want(PhaseReaddir) || want(PhaseRename) || want(PhaseUnlink)
	prefix := "f"
	var out []PhaseResult
	for _, name := range MetaPhases {
		timed := want(name)
		if !timed && !(name == PhaseCreate && needFiles) {
			continue
		}
		op := localPhase(name, cfg, &prefix)
		recs := make([]recorder, cfg.Clients)
		start := time.Now()
		var wg sync.WaitGroup
		for k := range recs {
			recs[k].ctx = ctx
			wg.Go(func() { op(wdirs[k], &recs[k]) })
		}
		wg.Wait()
		res := collect(name, time.Since(start), recs)
		if res.Errors > 0 {
			return nil, fmt.Errorf("bench: local baseline %s: %w", name, res.FirstErr)
		}
		if name == PhaseRename {
			prefix = "g"
		}
		if timed {
			out = append(out, res)
		}
	}
	return out, nil
}

func localPhase(name string, cfg MetaConfig, prefix *string) func(dir string, rec *recorder) {
	n := cfg.Files
	switch name {
	case PhaseMkdir:
		return func(dir string, rec *recorder) {
			for i := range n {
				rec.do(func() error { return os.Mkdir(filepath.Join(dir, "d"+strconv.Itoa(i)), 0o755) })
			}
		}
	case PhaseCreate:
		return func(dir string, rec *recorder) {
			for i := range n {
				rec.do(func() error {
					f, err := os.OpenFile(filepath.Join(dir, "f"+strconv.Itoa(i)), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
					if err != nil {
						return err
					}
					return f.Close()
				})
			}
		}
	case PhaseStat:
		return func(dir string, rec *recorder) {
			for range statPasses {
				for i := range n {
					rec.do(func() error {
						_, err := os.Lstat(filepath.Join(dir, *prefix+strconv.Itoa(i)))
						return err
					})
				}
			}
		}
	case PhaseReaddir:
		return func(dir string, rec *recorder) {
			for range readdirPasses {
				rec.do(func() error {
					ents, err := os.ReadDir(dir)
					if err != nil {
						return err
					}
					for _, e := range ents {
						if _, err := e.Info(); err != nil {
							return err
						}
					}
					rec.entries += int64(len(ents))
					return nil
				})
			}
		}
	case PhaseRename:
		return func(dir string, rec *recorder) {
			for i := range n {
				rec.do(func() error {
					s := strconv.Itoa(i)
					return os.Rename(filepath.Join(dir, "f"+s), filepath.Join(dir, "g"+s))
				})
			}
		}
	case PhaseUnlink:
		return func(dir string, rec *recorder) {
			for i := range n {
				rec.do(func() error { return os.Remove(filepath.Join(dir, *prefix+strconv.Itoa(i))) })
			}
			if slices.Contains(cfg.Phases, PhaseMkdir) {
				for i := range n {
					rec.do(func() error { return os.Remove(filepath.Join(dir, "d"+strconv.Itoa(i))) })
				}
			}
		}
	}
	panic("bench: unknown phase " + name)
}
