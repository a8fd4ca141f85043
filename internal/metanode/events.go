package metanode

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// events keeps the node's recent events for the dashboard: warnings and
// errors, and the notable happenings the node logs (elections, replica
// groups created or changed, dead members replaced, moves, joins). It is
// fed by the node's logger (eventHandler), so every such log line shows,
// with no second bookkeeping at the call sites.
type events struct {
	mu   sync.Mutex
	ring []Event
	next int
	full bool
}

// Event is one line of the dashboard's "recent events".
type Event struct {
	At    time.Time `json:"at"`
	Level string    `json:"level"`
	Msg   string    `json:"msg"`
	// Attrs are the log line's key=value pairs.
	Attrs string `json:"attrs"`
}

const eventsKept = 200

func (e *events) add(ev Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ring == nil {
		e.ring = make([]Event, eventsKept)
	}
	e.ring[e.next] = ev
	e.next = (e.next + 1) % eventsKept
	if e.next == 0 {
		e.full = true
	}
}

// recent returns the events, newest first.
func (e *events) recent() []Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := e.next
	if e.full {
		n = eventsKept
	}
	out := make([]Event, 0, n)
	for i := 1; i <= n; i++ {
		out = append(out, e.ring[(e.next-i+eventsKept)%eventsKept])
	}
	return out
}

// notable are the Info messages that make an event.
var notable = map[string]bool{
	"leadership changed":               true,
	"replica group created":            true,
	"replica group membership changed": true,
	"ministry member dead: replaced":   true,
	"subtree move begun":               true,
	"subtree move":                     true,
	"subtree move aborted":             true,
	"metadata node joined":             true,
	"node certificate bound":           true,
	"chunk token key rotated":          true,
	"hosting ministry":                 true,
	"ministry dissolved: its move aborted before it held anything": true,
	"cluster id":            true,
	"metadata node is back": true,
	"chunk server is back":  true,
}

// eventHandler passes records on to the node's log handler and keeps the
// notable ones.
type eventHandler struct {
	next  slog.Handler
	ev    *events
	attrs []slog.Attr
}

func (h *eventHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo || h.next.Enabled(ctx, l)
}

func (h *eventHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn || (r.Level == slog.LevelInfo && notable[r.Message]) {
		var b strings.Builder
		write := func(a slog.Attr) bool {
			if a.Key == "node" {
				return true // every line of this node has it
			}
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%s=%v", a.Key, a.Value)
			return true
		}
		for _, a := range h.attrs {
			write(a)
		}
		r.Attrs(write)
		h.ev.add(Event{At: r.Time, Level: r.Level.String(), Msg: r.Message, Attrs: b.String()})
	}
	if !h.next.Enabled(ctx, r.Level) {
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h *eventHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &eventHandler{next: h.next.WithAttrs(as), ev: h.ev, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}

func (h *eventHandler) WithGroup(name string) slog.Handler {
	return &eventHandler{next: h.next.WithGroup(name), ev: h.ev, attrs: h.attrs}
}
