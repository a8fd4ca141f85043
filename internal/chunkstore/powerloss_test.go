package chunkstore

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

// diskModel tracks what a power loss keeps of the chunks directory in the
// harshest legal outcome: every file's contents as of its last fsync or
// fdatasync, and the directory's names as of its last fsync. Anything
// else is lost (renames revert, new files vanish, writes disappear).
type diskModel struct {
	t     *testing.T
	dir   string
	data  map[uint64][]byte // inode → contents at its last sync
	names map[string]uint64 // name → inode at the directory's last sync
}

func inode(fi os.FileInfo) uint64 { return fi.Sys().(*syscall.Stat_t).Ino }

// synced records everything in the directory as durable.
func (d *diskModel) syncedAll() {
	d.data, d.names = map[uint64][]byte{}, map[string]uint64{}
	d.syncDir()
	for name, ino := range d.names {
		b, err := os.ReadFile(filepath.Join(d.dir, name))
		if err != nil {
			d.t.Fatal(err)
		}
		d.data[ino] = b
	}
}

func (d *diskModel) syncDir() {
	ents, err := os.ReadDir(d.dir)
	if err != nil {
		d.t.Fatal(err)
	}
	d.names = map[string]uint64{}
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			d.t.Fatal(err)
		}
		d.names[e.Name()] = inode(fi)
	}
}

// afterSync is the AfterSync knob.
func (d *diskModel) afterSync(f *os.File) {
	fi, err := f.Stat()
	if err != nil {
		d.t.Fatal(err)
	}
	if fi.IsDir() {
		d.syncDir()
		return
	}
	// NB: through /proc, because f may be open write-only.
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
	if err != nil {
		d.t.Fatal(err)
	}
	d.data[inode(fi)] = b
}

// image writes what the disk would hold after a power loss now into a
// new store directory (with root's store.json) and returns it.
func (d *diskModel) image(root string) string {
	img := d.t.TempDir()
	sj, err := os.ReadFile(filepath.Join(root, "store.json"))
	if err != nil {
		d.t.Fatal(err)
	}
	os.WriteFile(filepath.Join(img, "store.json"), sj, 0o644)
	os.Mkdir(filepath.Join(img, "chunks"), 0o755)
	for name, ino := range d.names {
		// A name synced before its contents ever were holds nothing.
		if err := os.WriteFile(filepath.Join(img, "chunks", name), d.data[ino], 0o644); err != nil {
			d.t.Fatal(err)
		}
	}
	return img
}

// durableAfter reports whether a power loss at step i of steps must keep
// the new state: the commit's write has been synced (journal, slot, or
// for a new metadata file the directory after its rename).
func durableAfter(steps []Step, i int) bool {
	for _, st := range []Step{StepJournalSync, StepSlotSync, StepDirSync} {
		if j := slices.Index(steps, st); j >= 0 {
			return i > j
		}
	}
	panic("a mutation without a commit")
}

// TestPowerLossAtEachStep cuts the power before every step of every
// scenario, and once after the mutation returned, losing everything not
// synced: the chunk must be exactly the old or the new one, the new one
// once its commit was synced, and always after the call returned (an
// acknowledged write is durable).
func TestPowerLossAtEachStep(t *testing.T) {
	for _, sc := range scenarios() {
		before, after, steps := referenceStates(t, sc)
		for i := range len(steps) + 1 {
			name := "returned"
			if i < len(steps) {
				name = string(steps[i])
			}
			t.Run(fmt.Sprintf("%s/%s", sc.name, name), func(t *testing.T) {
				dir := t.TempDir()
				d := &diskModel{t: t, dir: filepath.Join(dir, "chunks")}
				armed, recording := false, false
				cfg := testConfig(dir)
				cfg.Knobs = &TestingKnobs{
					BeforeStep: func(h Handle, st Step) error {
						if armed && st == steps[i] {
							armed = false
							panic(crashNow{})
						}
						return nil
					},
					AfterSync: func(f *os.File) {
						if recording {
							d.afterSync(f)
						}
					},
				}
				s := openT(t, cfg)
				if err := sc.setup(s); err != nil {
					t.Fatalf("setup: %v", err)
				}
				d.syncedAll()
				recording, armed = true, i < len(steps)
				var opErr error
				func() {
					defer func() {
						if r := recover(); r != nil {
							if _, ok := r.(crashNow); !ok {
								panic(r)
							}
						}
					}()
					opErr = sc.op(s)
				}()
				if i == len(steps) && opErr != nil {
					t.Fatalf("op: %v", opErr)
				}
				recording = false
				crashed(s)
				img := d.image(dir)
				r := openT(t, testConfig(img))
				got := readState(t, r)
				r.Close()
				switch {
				case got.equal(after):
				case got.equal(before) && (i == len(steps) || !durableAfter(steps, i)):
					t.Logf("power loss kept the old chunk")
				case got.equal(before):
					t.Fatalf("power loss after the commit was synced lost the mutation")
				default:
					t.Fatalf("after power loss chunk is %v, want the old %v or the new %v", got, before, after)
				}
				if i == len(steps) && !got.equal(after) {
					t.Fatalf("acknowledged mutation lost by a power loss")
				}
				checkRecovered(t, img, got)
			})
		}
	}
}
