package lease

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/govfs/govfs/internal/ids"
)

// Mode is what a lease allows.
type Mode uint8

const (
	// Read lets the holder cache the range's data and the inode's
	// attributes without revalidating.
	Read Mode = 1
	// Write makes the holder the only client writing the range.
	Write Mode = 2
)

func (m Mode) String() string {
	switch m {
	case Read:
		return "read"
	case Write:
		return "write"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// ID names a granted lease; ids are never reused by one Table.
type ID uint64

// ClientID is the holder: the client_id of the client's request ids.
type ClientID uint64

// ToEnd is the End of a range that runs to the end of any file.
const ToEnd = math.MaxUint64

// RangeEnd returns the end of [off, off+length): ToEnd for length 0
// (the whole file from off) or when off+length overflows.
func RangeEnd(off, length uint64) uint64 {
	if length == 0 || off+length < off {
		return ToEnd
	}
	return off + length
}

// Request asks for a lease.
type Request struct {
	Client ClientID
	Ino    ids.Ino
	Mode   Mode
	// Off and End delimit the byte range [Off, End); End > Off.
	Off, End uint64
	// Lock makes it a lock (fcntl/flock through a mount) instead of a
	// caching lease: locks conflict only with locks, are never revoked
	// (a conflicting request waits for their release or expiry) and are
	// not drained by changes. Owner tells apart the lock owners of one
	// client; a client's leases with different owners conflict.
	Lock  bool
	Owner uint64
	// Token names one acquisition of the client (0: none): asking
	// again with the same token while its lease lives returns that
	// lease (a retry whose answer was lost). It plays no part in
	// conflicts.
	Token uint64
	// Dir makes a whole-range lease a directory lease: a write one
	// (asynchronous creates), besides conflicting as a write lease, is
	// drained (DrainReaders) by other clients' changes to the
	// directory's entries, as read leases are by changes to their
	// inode; a read one (a listing cached) is a read lease, drained by
	// those changes too. The minister marks the directory in its log
	// before the first grant of either, so that entry changes wait for
	// a new minister's fence (internal/metanode/lease.go).
	Dir bool
	// Buffered makes a whole-file write lease (not a lock) a buffered
	// one: its holder answers closes itself and sends their writes later
	// (write-behind, docs/leases.md). Besides conflicting as a write
	// lease, it is drained (DrainReaders) by other clients' changes of
	// the file, as a read lease is, and a conflicting request revokes it
	// even when it does not wait (Outcome.Buffered): whoever reads or
	// changes the file must see those writes first.
	Buffered bool
}

// Lease is a granted lease.
type Lease struct {
	ID ID
	Request
	// Expires is when the lease ends unless renewed.
	Expires time.Time
	// Revoked: the minister asked for it back; renewals no longer extend
	// it.
	Revoked bool
	// pins counts the holder's changes being proposed under it (Pin):
	// it does not expire meanwhile (a release meanwhile only makes it
	// expire once unpinned). downgradedBy is the seq of the first
	// command of the batch whose apply made it a read lease again
	// (Downgrade): that batch's retry may still pin it.
	pins         int
	downgradedBy uint64
}

// pinnedPoll is how soon a caller waiting for a pinned lease that is
// past its expiry looks again (it ends when its change is answered).
const pinnedPoll = 5 * time.Millisecond

// ends is when l may be gone: its expiry, or a moment from now for a
// pinned lease past it.
func (l *Lease) ends(now time.Time) time.Time {
	if l.pins > 0 && !now.Before(l.Expires) {
		return now.Add(pinnedPoll)
	}
	return l.Expires
}

// Config sets the table's times and bounds.
type Config struct {
	// TTL is how long a grant or renewal lasts (DefaultTTL when 0).
	TTL time.Duration
	// Fence is how long after StartTerm nothing is granted (TTL when 0).
	Fence time.Duration
	// MaxPerClient bounds the leases one client holds (DefaultMaxPerClient
	// when 0).
	MaxPerClient int
	// MaxClients bounds the clients holding leases at once (each opens a
	// lease session in the ministry's log), DefaultMaxClients when 0: a
	// new client past it is refused until others let theirs go.
	MaxClients int
	// FirstID is the first lease id handed out (1 when 0). A minister
	// starts each term's table at term<<32, so that an id of a previous
	// term, still believed held by a client cut off for longer than the
	// fence, never names a lease of this term.
	FirstID ID
}

const (
	// DefaultTTL is DESIGN §5's lease time to live.
	DefaultTTL = 10 * time.Second
	// DefaultMaxPerClient bounds one client's leases. (16,384 until
	// session 19: a mount that made 16,000 directories, each leased to
	// it from the start, had no room left for its files' read leases.)
	DefaultMaxPerClient = 65536
	// DefaultMaxClients bounds the clients holding leases of one
	// ministry: far more mounts than a cluster has, far fewer than would
	// exhaust a minister's memory (65,536 leases each at most).
	DefaultMaxClients = 16384
)

var (
	// ErrTooMany refuses a grant beyond Config.MaxPerClient.
	ErrTooMany = errors.New("lease: too many leases held by this client")
	// ErrBadRequest refuses a malformed request.
	ErrBadRequest = errors.New("lease: bad request")
)

type intent struct {
	req     Request
	seq     uint64
	expires time.Time
	// readersOnly: a mutation draining read leases; it blocks read
	// requests and directory leases only. holders counts the client's
	// changes in progress that share it (DrainReaders).
	readersOnly bool
	holders     int
	// all: a subtree move draining every lease (DrainAll); it blocks
	// every request, write leases and locks too.
	all bool
}

// Table is the lease table of one ministry on its minister. It is not
// safe for concurrent use: the caller serialises calls.
type Table struct {
	cfg        Config
	fenceUntil time.Time
	firstID    ID
	nextID     ID
	nextSeq    uint64
	leases     map[ID]*Lease
	byToken    map[tokenKey]ID
	byIno      map[ids.Ino]map[ID]*Lease
	byClient   map[ClientID]map[ID]*Lease
	intents    map[ids.Ino][]*intent
	// drainedAt is the seq of the latest drain intent made for each
	// inode (DrainedSince), pruned when large.
	drainedAt map[ids.Ino]uint64
	// revokedOf holds each client's revoked leases (RevokedOf, asked at
	// every keepalive, would otherwise go through all of them).
	revokedOf map[ClientID]map[ID]struct{}
	// scanAt is no later than the earliest expiry of a lease or intent:
	// expire looks at them only from then on. Why: every call scanned the
	// whole table, 18 % of a minister's CPU while grep -r held a
	// thousand read leases (profile, session 15).
	scanAt time.Time
}

// New returns an empty table that grants at once (call StartTerm to fence).
func New(cfg Config) *Table {
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Fence <= 0 {
		cfg.Fence = cfg.TTL
	}
	if cfg.MaxPerClient <= 0 {
		cfg.MaxPerClient = DefaultMaxPerClient
	}
	if cfg.MaxClients <= 0 {
		cfg.MaxClients = DefaultMaxClients
	}
	first := cfg.FirstID
	if first == 0 {
		first = 1
	}
	return &Table{cfg: cfg, firstID: first, nextID: first, leases: map[ID]*Lease{}, byIno: map[ids.Ino]map[ID]*Lease{},
		byClient: map[ClientID]map[ID]*Lease{}, intents: map[ids.Ino][]*intent{}, revokedOf: map[ClientID]map[ID]struct{}{}}
}

// TTL returns the lease time to live.
func (t *Table) TTL() time.Duration { return t.cfg.TTL }

// StartTerm forgets every lease and intent and grants nothing until
// now+Fence: the caller just became the minister, and leases granted by
// its predecessor may live until then.
func (t *Table) StartTerm(now time.Time) {
	t.leases, t.byToken = map[ID]*Lease{}, nil
	t.byIno = map[ids.Ino]map[ID]*Lease{}
	t.byClient = map[ClientID]map[ID]*Lease{}
	t.intents = map[ids.Ino][]*intent{}
	t.drainedAt = nil
	t.revokedOf = map[ClientID]map[ID]struct{}{}
	t.scanAt = time.Time{}
	t.fenceUntil = now.Add(t.cfg.Fence)
}

// FencedUntil returns when the current fence ends (zero time if never
// fenced).
func (t *Table) FencedUntil() time.Time { return t.fenceUntil }

// ErrNotReclaimable refuses a reclaim: the fence is over (the lease may
// have been given to someone else since), or the lease conflicts with
// one already reclaimed, or its id is taken.
var ErrNotReclaimable = errors.New("lease: cannot be reclaimed")

// Reclaim takes over l, a lease a previous minister granted (its holder
// says so), during the fence: it is held again, under its old id, for a
// TTL from now, as if renewed; l.Revoked says it was being given back
// (a conflicting request then still waits for its release). Only while
// fenced: after the fence, what nobody reclaimed may have been granted
// to others. A lease that conflicts with one already held here, or
// whose id is taken or belongs to this table's own range (FirstID and
// up), is refused: the previous minister could not have granted it, so
// its holder is mistaken (its lease is lost).
func (t *Table) Reclaim(now time.Time, l Lease) error {
	if err := validate(l.Request); err != nil {
		return err
	}
	if !now.Before(t.fenceUntil) {
		return fmt.Errorf("%w: the fence ended", ErrNotReclaimable)
	}
	if l.ID == 0 || l.ID >= t.firstID {
		return fmt.Errorf("%w: id %d is not a previous minister's", ErrNotReclaimable, l.ID)
	}
	t.expire(now)
	if old := t.leases[l.ID]; old != nil {
		if old.Client == l.Client && old.Request == l.Request {
			return nil // reclaimed twice: a retry
		}
		return fmt.Errorf("%w: id %d is taken", ErrNotReclaimable, l.ID)
	}
	for _, h := range t.byIno[l.Ino] {
		if conflicts(h.Request, l.Request) {
			return fmt.Errorf("%w: conflicts with lease %d of client %d", ErrNotReclaimable, h.ID, h.Client)
		}
	}
	if err := t.roomFor(l.Client); err != nil {
		return err
	}
	l.Token = 0
	l.Expires = now.Add(t.cfg.TTL)
	t.add(&l)
	return nil
}

// EndFence ends the fence now: every lease of the previous minister
// that may still be live is known here (its holders reclaimed it), so
// conflicts are decided by this table alone.
func (t *Table) EndFence(now time.Time) {
	if now.Before(t.fenceUntil) {
		t.fenceUntil = now
	}
}

// Fenced reports whether the table is in its fence at now.
func (t *Table) Fenced(now time.Time) bool { return now.Before(t.fenceUntil) }

// Outcome is Acquire's answer.
type Outcome struct {
	// Granted is set when the lease was granted.
	Granted bool
	Lease   Lease
	// RetryAt, when refused: the earliest time the answer may change by
	// itself (a conflicting lease or intent expires, the fence ends).
	// Releases can change it sooner.
	RetryAt time.Time
	// Revoked lists the leases this call asked back (their holders should
	// be told now).
	Revoked []Lease
	// Conflict, when refused because of a lease, is one lease in the way
	// (the oldest); nil when only intents or the fence are.
	Conflict *Lease
	// Buffered, when refused: a buffered lease of another client is in
	// the way. It was revoked even by a request that does not wait: its
	// holder sends its writes and gives it back within moments, and the
	// caller should wait for that rather than read past the writes.
	Buffered bool
}

func validate(r Request) error {
	switch {
	case r.Mode != Read && r.Mode != Write:
		return fmt.Errorf("%w: mode %v", ErrBadRequest, r.Mode)
	case r.End <= r.Off:
		return fmt.Errorf("%w: empty range [%d, %d)", ErrBadRequest, r.Off, r.End)
	case r.Client == 0:
		return fmt.Errorf("%w: client id 0", ErrBadRequest)
	case r.Ino == 0:
		return fmt.Errorf("%w: inode 0", ErrBadRequest)
	case r.Dir && (r.Lock || r.Off != 0 || r.End != ToEnd):
		return fmt.Errorf("%w: a directory lease is a whole-range lease, not a lock", ErrBadRequest)
	case r.Buffered && (r.Lock || r.Dir || r.Mode != Write || r.Off != 0 || r.End != ToEnd):
		return fmt.Errorf("%w: a buffered lease is a whole-file write lease, not a lock or a directory lease", ErrBadRequest)
	}
	return nil
}

func overlap(a, b Request) bool { return a.Off < b.End && b.Off < a.End }

// sameHolder: one client's leases of one owner never conflict.
func sameHolder(a, b Request) bool { return a.Client == b.Client && a.Owner == b.Owner }

// conflicts says whether leases a and b cannot both be held. Locks and
// caching leases live apart: one never conflicts with the other.
func conflicts(a, b Request) bool {
	return !sameHolder(a, b) && a.Lock == b.Lock && a.Ino == b.Ino && (a.Mode == Write || b.Mode == Write) && overlap(a, b)
}

// holdsOverlapping says whether the requester (client and owner) holds a
// lock overlapping req.
func (t *Table) holdsOverlapping(req Request) bool {
	for _, l := range t.byClient[req.Client] {
		if l.Lock && l.Owner == req.Owner && l.Ino == req.Ino && overlap(l.Request, req) {
			return true
		}
	}
	return false
}

// coveredLock returns a lock the requester already holds that covers
// req's range in a mode at least as strong: splitting or downgrading
// a held lock is granted at once, ahead of any queue.
func (t *Table) coveredLock(req Request) bool {
	if !req.Lock {
		return false
	}
	for _, l := range t.byClient[req.Client] {
		if l.Lock && l.Owner == req.Owner && l.Ino == req.Ino && l.Off <= req.Off && req.End <= l.End &&
			(l.Mode == Write || req.Mode == Read) {
			return true
		}
	}
	return false
}

// Acquire grants req or says why not. wait > 0 means the caller will ask
// again for up to wait: the conflicting leases are revoked and an intent
// is kept until now+wait, so later conflicting requests of other clients
// queue behind this one. With wait 0 nothing is revoked or queued (a
// try).
func (t *Table) Acquire(now time.Time, req Request, wait time.Duration) (Outcome, error) {
	if err := validate(req); err != nil {
		return Outcome{}, err
	}
	t.expire(now)
	if req.Token != 0 {
		if id, ok := t.byToken[tokenKey{req.Client, req.Token}]; ok {
			if l := t.leases[id]; l != nil {
				return Outcome{Granted: true, Lease: *l}, nil
			}
		}
	}
	if !now.Before(t.fenceUntil) && t.coveredLock(req) {
		return t.grant(now, req)
	}
	own := t.findIntent(req)
	if wait > 0 {
		if own == nil {
			ir := req
			ir.Token = 0
			own = &intent{req: ir, seq: t.nextSeq}
			t.nextSeq++
			t.intents[req.Ino] = append(t.intents[req.Ino], own)
		}
		if exp := now.Add(wait); exp.After(own.expires) {
			own.expires = exp
			t.noteExpiry(exp)
		}
	}
	if now.Before(t.fenceUntil) {
		return Outcome{RetryAt: t.fenceUntil}, nil
	}
	var out Outcome
	blocked := false
	// An owner converting a lock it holds (read to write, or flock
	// shared to exclusive) is not queued behind waiters: they may be
	// waiting for that very lock, and both would wait for ever.
	converting := req.Lock && t.holdsOverlapping(req)
	for _, in := range t.intents[req.Ino] {
		if converting {
			break
		}
		// Newer intents wait behind older ones, except a change draining
		// readers: no read may be granted past it, whatever its age
		// (found in review: an older waiting reader got a lease nobody
		// would revoke).
		if in == own || (own != nil && in.seq > own.seq && !in.readersOnly) || sameHolder(in.req, req) {
			continue
		}
		if (in.readersOnly && (in.all || (!req.Lock && (req.Mode == Read || req.Dir || req.Buffered))) && overlap(in.req, req)) || (!in.readersOnly && conflicts(in.req, req)) {
			blocked = true
			out.RetryAt = earliest(out.RetryAt, in.expires)
		}
	}
	for _, l := range t.sortedOn(req.Ino) {
		if !conflicts(l.Request, req) {
			continue
		}
		blocked = true
		out.RetryAt = earliest(out.RetryAt, l.ends(now))
		if out.Conflict == nil {
			c := *l
			out.Conflict = &c
		}
		out.Buffered = out.Buffered || l.Buffered
		if (wait > 0 || l.Buffered) && !l.Revoked && !l.Lock {
			t.markRevoked(l)
			out.Revoked = append(out.Revoked, *l)
		}
	}
	if blocked {
		return out, nil
	}
	out, err := t.grant(now, req)
	// Granted, or refused for good (too many leases: the caller gets
	// ENOLCK and does not ask again): either way the intent must not
	// hold others back any longer.
	t.dropIntent(own)
	return out, err
}

// roomFor says whether client may hold one more lease: under its own
// bound, and, for a client holding none, under the bound on clients.
func (t *Table) roomFor(client ClientID) error {
	held := len(t.byClient[client])
	if held >= t.cfg.MaxPerClient {
		return fmt.Errorf("%w (%d)", ErrTooMany, t.cfg.MaxPerClient)
	}
	if held == 0 && len(t.byClient) >= t.cfg.MaxClients {
		return fmt.Errorf("%w: %d clients hold leases of this ministry, the most it serves", ErrTooMany, t.cfg.MaxClients)
	}
	return nil
}

func (t *Table) grant(now time.Time, req Request) (Outcome, error) {
	if err := t.roomFor(req.Client); err != nil {
		return Outcome{}, err
	}
	l := &Lease{ID: t.nextID, Request: req, Expires: now.Add(t.cfg.TTL)}
	t.nextID++
	t.add(l)
	return Outcome{Granted: true, Lease: *l}, nil
}

// DrainReaders prepares a change of ino by client: it revokes the read
// leases and directory leases other clients hold on ino and, with wait >
// 0, keeps an intent until now+wait that keeps new ones of others from
// being granted. It reports whether such read leases are still live and, if
// so, when the first of them expires. again says this change called it
// before (it polls until the leases are given back). Call DoneDraining
// once per change when it is applied (or abandoned): one client's
// concurrent changes of ino share the intent, which stays until the last
// of them is done (found in review: the first one done let a reader in
// while the second was still on its way to the log).
func (t *Table) DrainReaders(now time.Time, client ClientID, ino ids.Ino, wait time.Duration, again bool) (busy bool, retryAt time.Time, revoked []Lease) {
	return t.drain(now, client, ino, wait, again, false)
}

// DrainAll is DrainReaders for an inode about to move to another
// ministry: every other client's lease on it is revoked, write leases
// and directory leases included, and a byte-range lock (which cannot be
// revoked) keeps it busy until its owner releases it. Its intent keeps
// every new request out meanwhile, locks too.
func (t *Table) DrainAll(now time.Time, client ClientID, ino ids.Ino, wait time.Duration, again bool) (busy bool, retryAt time.Time, revoked []Lease) {
	return t.drain(now, client, ino, wait, again, true)
}

func (t *Table) drain(now time.Time, client ClientID, ino ids.Ino, wait time.Duration, again, all bool) (busy bool, retryAt time.Time, revoked []Lease) {
	t.expire(now)
	req := Request{Client: client, Ino: ino, Mode: Write, Off: 0, End: ToEnd}
	if wait > 0 {
		var own *intent
		for _, in := range t.intents[ino] {
			if in.readersOnly && in.req == req && in.all == all {
				own = in
			}
		}
		if own == nil {
			own = &intent{req: req, seq: t.nextSeq, readersOnly: true, all: all}
			if t.drainedAt == nil || len(t.drainedAt) > maxDrainedAt {
				t.pruneDrainedAt()
			}
			t.drainedAt[ino] = t.nextSeq
			t.nextSeq++
			t.intents[ino] = append(t.intents[ino], own)
		}
		if !again || own.holders == 0 {
			own.holders++
		}
		if exp := now.Add(wait); exp.After(own.expires) {
			own.expires = exp
			t.noteExpiry(exp)
		}
	}
	for _, l := range t.sortedOn(ino) {
		if l.Client == client || (!all && ((l.Mode != Read && !l.Dir && !l.Buffered) || l.Lock)) {
			continue
		}
		busy = true
		retryAt = earliest(retryAt, l.ends(now))
		if !l.Revoked && !l.Lock {
			t.markRevoked(l)
			revoked = append(revoked, *l)
		}
	}
	return busy, retryAt, revoked
}

// RecallDirWriters revokes the other clients' write directory leases on
// directory ino, for a read that must see their queued entry changes (a
// lookup that found nothing: close-to-open), and returns them all
// (revoked now or before): the read waits for those (StillHeld) and no
// others. It leaves no intent: a holder may take its lease again at
// once, and what it queues after the read began need not be seen.
func (t *Table) RecallDirWriters(now time.Time, client ClientID, ino ids.Ino) (held []ID, revoked []Lease) {
	t.expire(now)
	for _, l := range t.sortedOn(ino) {
		if l.Client == client || !l.Dir || l.Mode != Write || l.Lock {
			continue
		}
		held = append(held, l.ID)
		if !l.Revoked {
			t.markRevoked(l)
			revoked = append(revoked, *l)
		}
	}
	return held, revoked
}

// StillHeld says whether any of list is still held, and if so when the
// first of those expires.
func (t *Table) StillHeld(now time.Time, list []ID) (busy bool, retryAt time.Time) {
	t.expire(now)
	for _, id := range list {
		if l := t.leases[id]; l != nil {
			busy = true
			retryAt = earliest(retryAt, l.ends(now))
		}
	}
	return busy, retryAt
}

// DoneDraining ends one change of ino by client: the intent
// DrainReaders left goes when no other change of the client's still
// holds it.
func (t *Table) DoneDraining(client ClientID, ino ids.Ino) {
	req := Request{Client: client, Ino: ino, Mode: Write, Off: 0, End: ToEnd}
	for _, in := range t.intents[ino] {
		if in.readersOnly && in.req == req {
			if in.holders--; in.holders <= 0 {
				t.dropIntent(in)
			}
			return
		}
	}
}

// Draining says whether a change of ino (of a directory: of its
// entries) is on its way: an intent DrainReaders or DrainAll left that
// is not done or expired.
func (t *Table) Draining(now time.Time, ino ids.Ino) bool {
	t.expire(now)
	for _, in := range t.intents[ino] {
		if in.readersOnly {
			return true
		}
	}
	return false
}

// DrainMark returns a mark for DrainedSince: no drain intent made after
// it has been seen yet.
func (t *Table) DrainMark() uint64 { return t.nextSeq }

// DrainedSince says whether a change of ino may have been on its way at
// any time since mark (DrainMark): one is now (Draining), or a drain
// intent for ino was made after mark (it may be done already). A change
// on its way before mark and done since is not counted: the caller
// checks Draining at mark too.
func (t *Table) DrainedSince(now time.Time, ino ids.Ino, mark uint64) bool {
	if t.Draining(now, ino) {
		return true
	}
	at, ok := t.drainedAt[ino]
	return ok && at >= mark
}

// maxDrainedAt bounds drainedAt; pruning keeps the latest
// drainedKeep intents' inodes, far more than can be made while a
// DrainMark is held (a lease grant's few reads).
const (
	maxDrainedAt = 1 << 16
	drainedKeep  = 1 << 15
)

func (t *Table) pruneDrainedAt() {
	if t.drainedAt == nil {
		t.drainedAt = map[ids.Ino]uint64{}
		return
	}
	for ino, at := range t.drainedAt {
		if at+drainedKeep < t.nextSeq {
			delete(t.drainedAt, ino)
		}
	}
}

// AbandonDraining ends one change of ino by client that gave up waiting
// (the client will ask again): the intent stays until it expires, so new
// readers stay out meanwhile, but no longer counts the change.
func (t *Table) AbandonDraining(client ClientID, ino ids.Ino) {
	req := Request{Client: client, Ino: ino, Mode: Write, Off: 0, End: ToEnd}
	for _, in := range t.intents[ino] {
		if in.readersOnly && in.req == req {
			if in.holders > 0 {
				in.holders--
			}
			return
		}
	}
}

// Renew extends the client's leases in list by one TTL from now, except
// revoked ones. It returns the listed leases that are revoked (give them
// back) and those the table does not hold for the client (lost: expired,
// released, or never granted here).
func (t *Table) Renew(now time.Time, client ClientID, list []ID) (revoke, lost []ID) {
	t.expire(now)
	for _, id := range list {
		l := t.leases[id]
		switch {
		case l == nil || l.Client != client:
			lost = append(lost, id)
		case l.Revoked:
			revoke = append(revoke, id)
		default:
			l.Expires = now.Add(t.cfg.TTL)
		}
	}
	return revoke, lost
}

// Check is Renew without renewing: which listed leases are revoked or
// lost now.
func (t *Table) Check(now time.Time, client ClientID, list []ID) (revoke, lost []ID) {
	t.expire(now)
	for _, id := range list {
		l := t.leases[id]
		switch {
		case l == nil || l.Client != client:
			lost = append(lost, id)
		case l.Revoked:
			revoke = append(revoke, id)
		}
	}
	return revoke, lost
}

// RevokedOf returns the revoked leases client holds, by id: those a
// keepalive must report even if it did not list them (granted while it
// was on its way).
func (t *Table) RevokedOf(now time.Time, client ClientID) []ID {
	t.expire(now)
	var out []ID
	for id := range t.revokedOf[client] {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// Release drops the client's leases in list and returns how many it held.
func (t *Table) Release(now time.Time, client ClientID, list []ID) int {
	t.expire(now)
	n := 0
	for _, id := range list {
		if l := t.leases[id]; l != nil && l.Client == client {
			if l.pins > 0 {
				// A change under it is being proposed: it goes once
				// that is answered (Unpin), not before.
				l.Expires = now
				n++
				continue
			}
			t.remove(l)
			n++
		}
	}
	return n
}

// ErrNotUpgradable refuses an Upgrade or Downgrade of a lease that is
// not the client's, not live, or not of the right kind.
var ErrNotUpgradable = errors.New("lease: cannot be changed that way")

// Upgrade makes client's whole-file read lease id a buffered write lease
// (Request.Buffered) in place, keeping its id and expiry: it is trusted
// no longer than the read lease was, so its leadership confirmation
// still covers it. Refused (not Granted: Conflict or RetryAt say why;
// nothing changes) while another client holds a lease on the file, or
// asks for one, or a change of another client drains it, or the fence
// is up. Upgrading a buffered lease again grants it as it is.
func (t *Table) Upgrade(now time.Time, client ClientID, id ID) (Outcome, error) {
	t.expire(now)
	l := t.leases[id]
	switch {
	case l == nil || l.Client != client:
		return Outcome{}, fmt.Errorf("%w: lease %d is not held by client %d", ErrNotUpgradable, id, client)
	case l.Revoked:
		return Outcome{RetryAt: l.Expires}, nil
	case l.Buffered:
		return Outcome{Granted: true, Lease: *l}, nil
	case l.Lock || l.Dir || l.Mode != Read || l.Off != 0 || l.End != ToEnd:
		return Outcome{}, fmt.Errorf("%w: lease %d is not a whole-file read lease", ErrNotUpgradable, id)
	case now.Before(t.fenceUntil):
		return Outcome{RetryAt: t.fenceUntil}, nil
	}
	want := l.Request
	want.Mode, want.Buffered, want.Token = Write, true, 0
	var out Outcome
	for _, in := range t.intents[l.Ino] {
		if sameHolder(in.req, want) {
			continue
		}
		if in.readersOnly || conflicts(in.req, want) {
			out.RetryAt = earliest(out.RetryAt, in.expires)
		}
	}
	for _, o := range t.sortedOn(l.Ino) {
		if o != l && conflicts(o.Request, want) {
			out.RetryAt = earliest(out.RetryAt, o.ends(now))
			if out.Conflict == nil {
				c := *o
				out.Conflict = &c
			}
		}
	}
	if !out.RetryAt.IsZero() {
		return out, nil
	}
	l.Mode, l.Buffered, l.downgradedBy = Write, true, 0
	return Outcome{Granted: true, Lease: *l}, nil
}

// Downgrade makes client's buffered lease id a read lease again (its
// writes are applied). A read lease is left as it is. by, when not 0, is
// the seq of the first command of the batch whose apply downgrades it
// (see Pin).
func (t *Table) Downgrade(now time.Time, client ClientID, id ID, by uint64) error {
	t.expire(now)
	l := t.leases[id]
	switch {
	case l == nil || l.Client != client:
		return fmt.Errorf("%w: lease %d is not held by client %d", ErrNotUpgradable, id, client)
	case !l.Buffered && l.Mode == Read && !l.Lock && !l.Dir:
		return nil
	case !l.Buffered:
		return fmt.Errorf("%w: lease %d is not a buffered lease", ErrNotUpgradable, id)
	}
	l.Mode, l.Buffered, l.downgradedBy = Read, false, by
	return nil
}

// Pin keeps client's buffered leases list from expiring while a change
// made under them is proposed (MutateRequest.buffered_leases), so that
// no other client's change of their files, which drains them first, is
// ordered before it. lost lists those the client does not hold as
// buffered leases (nothing is pinned then); seq, the first command's of
// the batch, lets a retry of the batch whose apply downgraded a lease
// pin it still. Unpin once the proposal is answered.
func (t *Table) Pin(now time.Time, client ClientID, list []ID, seq uint64) (lost []ID) {
	t.expire(now)
	for _, id := range list {
		if l := t.leases[id]; l == nil || l.Client != client || !(l.Buffered || (seq != 0 && l.downgradedBy == seq)) {
			lost = append(lost, id)
		}
	}
	if len(lost) > 0 {
		return lost
	}
	for _, id := range list {
		t.leases[id].pins++
	}
	return nil
}

// Unpin ends Pin's hold on list.
func (t *Table) Unpin(list []ID) {
	for _, id := range list {
		if l := t.leases[id]; l != nil && l.pins > 0 {
			l.pins--
			if l.pins == 0 {
				t.noteExpiry(l.Expires) // expire looks again, if it is past
			}
		}
	}
}

// Leases returns the live leases on ino, by id.
func (t *Table) Leases(now time.Time, ino ids.Ino) []Lease {
	t.expire(now)
	var out []Lease
	for _, l := range t.sortedOn(ino) {
		out = append(out, *l)
	}
	return out
}

// Holds reports whether client holds lease id here.
func (t *Table) Holds(client ClientID, id ID) bool {
	l := t.leases[id]
	return l != nil && l.Client == client
}

// ClientLeases returns how many live leases client holds.
func (t *Table) ClientLeases(now time.Time, client ClientID) int {
	t.expire(now)
	return len(t.byClient[client])
}

// Len returns the number of leases held (expired ones included until the
// next call that takes a time).
func (t *Table) Len() int { return len(t.leases) }

// Clients is how many clients hold leases.
func (t *Table) Clients() int { return len(t.byClient) }

// NextExpiry returns the earliest expiry of a lease or intent (zero if
// none): when the table may change by itself.
func (t *Table) NextExpiry() time.Time {
	var at time.Time
	for _, l := range t.leases {
		at = earliest(at, l.Expires)
	}
	for _, ins := range t.intents {
		for _, in := range ins {
			at = earliest(at, in.expires)
		}
	}
	return at
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

func (t *Table) sortedOn(ino ids.Ino) []*Lease {
	m := t.byIno[ino]
	out := make([]*Lease, 0, len(m))
	for _, l := range m {
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (t *Table) findIntent(req Request) *intent {
	req.Token = 0 // a waiter asking again in a later step keeps its place
	for _, in := range t.intents[req.Ino] {
		if !in.readersOnly && in.req == req {
			return in
		}
	}
	return nil
}

func (t *Table) dropIntent(in *intent) {
	if in == nil {
		return
	}
	ins := t.intents[in.req.Ino]
	for i, x := range ins {
		if x == in {
			ins = append(ins[:i], ins[i+1:]...)
			break
		}
	}
	if len(ins) == 0 {
		delete(t.intents, in.req.Ino)
	} else {
		t.intents[in.req.Ino] = ins
	}
}

type tokenKey struct {
	client ClientID
	token  uint64
}

func (t *Table) add(l *Lease) {
	t.leases[l.ID] = l
	if l.Token != 0 {
		if t.byToken == nil {
			t.byToken = map[tokenKey]ID{}
		}
		t.byToken[tokenKey{l.Client, l.Token}] = l.ID
	}
	if t.byIno[l.Ino] == nil {
		t.byIno[l.Ino] = map[ID]*Lease{}
	}
	t.byIno[l.Ino][l.ID] = l
	if t.byClient[l.Client] == nil {
		t.byClient[l.Client] = map[ID]*Lease{}
	}
	t.byClient[l.Client][l.ID] = l
	if l.Revoked {
		t.markRevoked(l)
	}
	t.noteExpiry(l.Expires)
}

// markRevoked marks l revoked (its holder is asked to give it back).
func (t *Table) markRevoked(l *Lease) {
	l.Revoked = true
	m := t.revokedOf[l.Client]
	if m == nil {
		m = map[ID]struct{}{}
		t.revokedOf[l.Client] = m
	}
	m[l.ID] = struct{}{}
}

// noteExpiry notes that something expires at e (expire looks then).
func (t *Table) noteExpiry(e time.Time) {
	if t.scanAt.IsZero() || e.Before(t.scanAt) {
		t.scanAt = e
	}
}

func (t *Table) remove(l *Lease) {
	delete(t.leases, l.ID)
	if k := (tokenKey{l.Client, l.Token}); l.Token != 0 && t.byToken[k] == l.ID {
		delete(t.byToken, k)
	}
	if m := t.byIno[l.Ino]; m != nil {
		delete(m, l.ID)
		if len(m) == 0 {
			delete(t.byIno, l.Ino)
		}
	}
	if m := t.byClient[l.Client]; m != nil {
		delete(m, l.ID)
		if len(m) == 0 {
			delete(t.byClient, l.Client)
		}
	}
	if m := t.revokedOf[l.Client]; m != nil {
		delete(m, l.ID)
		if len(m) == 0 {
			delete(t.revokedOf, l.Client)
		}
	}
}

// expire drops leases and intents whose time is up.
func (t *Table) expire(now time.Time) {
	if !t.scanAt.IsZero() && now.Before(t.scanAt) {
		return // nothing expires before scanAt
	}
	var next time.Time
	later := func(e time.Time) {
		if next.IsZero() || e.Before(next) {
			next = e
		}
	}
	for _, l := range t.leases {
		if !now.Before(l.Expires) && l.pins == 0 {
			t.remove(l)
		} else if l.pins == 0 {
			later(l.Expires)
		}
	}
	for ino, ins := range t.intents {
		live := ins[:0]
		for _, in := range ins {
			if now.Before(in.expires) {
				live = append(live, in)
				later(in.expires)
			}
		}
		if len(live) == 0 {
			delete(t.intents, ino)
		} else {
			t.intents[ino] = live
		}
	}
	if next.IsZero() {
		// Nothing left: the next lease or intent notes its expiry.
		next = now.Add(time.Duration(1 << 62))
	}
	t.scanAt = next
}
