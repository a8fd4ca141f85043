package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// progressMin is the smallest transfer that gets a progress bar: smaller
// ones finish before a bar would tell anything.
const progressMin = 16 << 20

// progressEvery is how often the bar is redrawn.
const progressEvery = 200 * time.Millisecond

// isTerminal reports whether w is a terminal (a character device), the
// only place a progress bar is drawn: redirected to a file or a pipe,
// stderr gets no control characters.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// progress draws a one-line progress bar, redrawn in place every
// progressEvery by a goroutine that Finish stops. It counts the bytes
// written to it (an io.Writer for io.TeeReader and io.MultiWriter). The
// bar shows once the transfer is known or seen to be at least
// progressMin bytes. A nil *progress counts nothing and draws nothing.
type progress struct {
	w     io.Writer
	label string
	total int64 // <= 0: unknown
	start time.Time
	now   func() time.Time
	n     atomic.Int64

	stop chan struct{}
	wg   sync.WaitGroup
	// drawn is set once a line was drawn (only the drawing goroutine and,
	// after it stopped, Finish touch it).
	drawn bool
}

// startProgress returns a progress bar drawing on w, or nil when w is nil.
func startProgress(w io.Writer, label string, total int64) *progress {
	if w == nil {
		return nil
	}
	p := &progress{w: w, label: label, total: total, now: time.Now, stop: make(chan struct{})}
	p.start = p.now()
	p.wg.Go(func() {
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				p.draw()
			}
		}
	})
	return p
}

// Write counts len(b) bytes.
func (p *progress) Write(b []byte) (int, error) {
	p.add(int64(len(b)))
	return len(b), nil
}

// counter returns p as an io.Writer that counts, or io.Discard for nil.
func (p *progress) counter() io.Writer {
	if p == nil {
		return io.Discard
	}
	return p
}

func (p *progress) add(n int64) {
	if p != nil {
		p.n.Add(n)
	}
}

func (p *progress) draw() {
	if n := p.n.Load(); p.total >= progressMin || n >= progressMin {
		fmt.Fprintf(p.w, "\r%s\x1b[K", p.line(n, p.now().Sub(p.start)))
		p.drawn = true
	}
}

// Finish stops redrawing and, if a bar was drawn, draws the final state
// and ends the line.
func (p *progress) Finish() {
	if p == nil {
		return
	}
	close(p.stop)
	p.wg.Wait()
	if p.drawn {
		p.draw()
		fmt.Fprintln(p.w)
	}
}

// line renders the bar: "put /a  [=====>    ]  45.0 MiB / 100.0 MiB  45%  12.3 MiB/s".
func (p *progress) line(n int64, elapsed time.Duration) string {
	const width = 24
	var b strings.Builder
	b.WriteString(p.label)
	if p.total > 0 {
		frac := min(float64(n)/float64(p.total), 1)
		full := int(frac * width)
		bar := strings.Repeat("=", full)
		if full < width {
			bar += ">" + strings.Repeat(" ", width-full-1)
		}
		fmt.Fprintf(&b, "  [%s]  %s / %s  %3.0f%%", bar, mib(n), mib(p.total), 100*frac)
	} else {
		fmt.Fprintf(&b, "  %s", mib(n))
	}
	if s := elapsed.Seconds(); s > 0 {
		fmt.Fprintf(&b, "  %s/s", mib(int64(float64(n)/s)))
	}
	return b.String()
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
