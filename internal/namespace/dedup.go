package namespace

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"syscall"

	"google.golang.org/protobuf/proto"

	"github.com/govfs/govfs/internal/engine"
	"github.com/govfs/govfs/internal/wire"
)

const (
	// dedupWindow is how many answers per client are kept at most.
	// A client (a mount serving many processes) may issue this many newer
	// commands while one waits (a lease drain or fence waits up to a TTL)
	// before that one is refused as too old.
	dedupWindow = 1 << 16
	// clientIdleNs is how long (in command time) a silent client is
	// remembered.
	clientIdleNs = int64(3600e9)
	// maxExpirePerApply bounds the work expiry adds to one command.
	maxExpirePerApply = 256
	// idleQuantumNs is the precision of a client's last use, and how often
	// (in command time) expiry runs.
	idleQuantumNs = int64(60e9)
)

// expiryKey holds the quantum in which idle clients were last expired.
var expiryKey = []byte("e")

// clientRecord is the decoded "k" <client> value.
//
// Encoding: lastUse (8 bytes), watermark (8), then, when the ministry
// knows which of the client's answers it holds, a tag byte 1, the first
// held seq (8) and a bitmap of held seqs from it (bit i: seq first+i).
// A 16-byte record (older maps, a client some answers were imported for)
// does not know: its answers below a new watermark are deleted blindly,
// one point delete per seq.
//
// Why track them: a client's seqs are one sequence over every ministry
// it talks to, so with K ministries each sees about one seq in K, and
// blind deletes left K-1 tombstones of never-written keys per command.
// With 5 ministries that was a third more apply, memtable and compaction
// work per create (govfs bench meta, pprof: dedupBegin's point reads
// 10 -> 23 us/op walking those tombstones).
type clientRecord struct {
	lastUse   uint64 // timeKey of the last command time
	watermark uint64 // answers below this seq were dropped
	tracked   bool   // held lists every answer stored here at or above watermark
	held      []uint64
}

// maxHeldSpan bounds the bitmap (8 KiB): answers further apart than the
// dedup window cannot all be held anyway; past it the record stops
// tracking and deletes blindly.
const maxHeldSpan = dedupWindow + 1

func loadClient(r engine.Reader, client uint64) (rec clientRecord, found bool, err error) {
	v, err := r.Get(clientKey(client))
	if err != nil {
		return rec, false, fmt.Errorf("namespace: get client %d: %w", client, err)
	}
	if v == nil {
		return rec, false, nil
	}
	rec, err = decodeClient(v)
	if err != nil {
		return rec, false, fmt.Errorf("namespace: client record %d: %w", client, err)
	}
	return rec, true, nil
}

func decodeClient(v []byte) (clientRecord, error) {
	if len(v) < 16 {
		return clientRecord{}, fmt.Errorf("corrupt (%d bytes)", len(v))
	}
	rec := clientRecord{lastUse: binary.BigEndian.Uint64(v), watermark: binary.BigEndian.Uint64(v[8:])}
	v = v[16:]
	if len(v) == 0 {
		return rec, nil // untracked
	}
	if v[0] != 1 || len(v) < 9 || len(v)-9 > maxHeldSpan/8+1 {
		return clientRecord{}, fmt.Errorf("corrupt held-answers part (tag %d, %d bytes)", v[0], len(v))
	}
	rec.tracked = true
	first := binary.BigEndian.Uint64(v[1:])
	for i, b := range v[9:] {
		for bit := range 8 {
			if b&(1<<bit) != 0 {
				rec.held = append(rec.held, first+uint64(i*8+bit))
			}
		}
	}
	return rec, nil
}

func (rec clientRecord) encode() []byte {
	v := binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(make([]byte, 0, 32), rec.lastUse), rec.watermark)
	if !rec.tracked {
		return v
	}
	first := uint64(0)
	if len(rec.held) > 0 {
		first = rec.held[0]
	}
	v = binary.BigEndian.AppendUint64(append(v, 1), first)
	if len(rec.held) > 0 {
		bm := make([]byte, (rec.held[len(rec.held)-1]-first)/8+1)
		for _, s := range rec.held {
			bm[(s-first)/8] |= 1 << ((s - first) % 8)
		}
		v = append(v, bm...)
	}
	return v
}

// hold records that the answer to seq is stored; past the bitmap's bound
// the record stops tracking (then deletes blindly, which is always safe).
func (rec *clientRecord) hold(seq uint64) {
	if !rec.tracked {
		return
	}
	i, ok := slices.BinarySearch(rec.held, seq)
	if ok {
		return
	}
	rec.held = slices.Insert(rec.held, i, seq)
	if rec.held[len(rec.held)-1]-rec.held[0] >= maxHeldSpan {
		rec.tracked, rec.held = false, nil
	}
}

// clientCache holds the client records a batch's commands read and
// change: each is decoded once and stored once, at the batch's end
// (flush). Why: every command decoded its client's record and encoded it
// again, bitmap and held list included, and a batch's 1,000 commands
// hold up to 1,000 answers: a quarter of each metadata node's CPU
// during cp -a (pprof: loadClient, decodeClient, growslice).
//
// INVARIANT: a client cached in a batch is not expired by the same batch
// (expireClients deletes records behind the cache's back): its commands'
// times are the batch's within maxClientAhead/maxClientBehind, its last
// use is kept to idleQuantumNs, and clients expire only after
// clientIdleNs, far longer than both (checked below).
type clientCache struct {
	recs map[uint64]*cachedClient
}

// The margin clientCache relies on.
var _ = [1]struct{}{}[(maxClientBehind+maxClientAhead+idleQuantumNs)*10/clientIdleNs]

type cachedClient struct {
	rec          clientRecord
	found, dirty bool
}

// load is loadClient through cc (nil: none).
func (cc *clientCache) load(r engine.Reader, client uint64) (clientRecord, bool, error) {
	if cc == nil {
		return loadClient(r, client)
	}
	if c := cc.recs[client]; c != nil {
		return c.rec, c.found, nil
	}
	rec, found, err := loadClient(r, client)
	if err != nil {
		return rec, found, err
	}
	if cc.recs == nil {
		cc.recs = map[uint64]*cachedClient{}
	}
	cc.recs[client] = &cachedClient{rec: rec, found: found}
	return rec, found, nil
}

// store is storeClient through cc (nil: none).
func (cc *clientCache) store(rw engine.ReadWriter, client uint64, rec clientRecord) error {
	if cc == nil {
		return storeClient(rw, client, rec)
	}
	if cc.recs == nil {
		cc.recs = map[uint64]*cachedClient{}
	}
	cc.recs[client] = &cachedClient{rec: rec, found: true, dirty: true}
	return nil
}

// flush stores the changed records (in client order) and empties cc.
func (cc *clientCache) flush(rw engine.ReadWriter) error {
	clients := make([]uint64, 0, len(cc.recs))
	for client, c := range cc.recs {
		if c.dirty {
			clients = append(clients, client)
		}
	}
	slices.Sort(clients)
	for _, client := range clients {
		if err := storeClient(rw, client, cc.recs[client].rec); err != nil {
			return err
		}
	}
	cc.recs = nil
	return nil
}

func storeClient(rw engine.ReadWriter, client uint64, rec clientRecord) error {
	if err := rw.Set(clientKey(client), rec.encode()); err != nil {
		return fmt.Errorf("namespace: set client %d: %w", client, err)
	}
	return nil
}

// Answered says whether request req was applied here and its answer is
// still kept (a retry of it would be answered from it).
func Answered(r engine.Reader, req *wire.RequestID) (bool, error) {
	if req.GetClientId() == 0 {
		return false, nil
	}
	v, err := r.Get(resultKey(req.GetClientId(), req.GetSeq()))
	if err != nil {
		return false, fmt.Errorf("namespace: get result %d/%d: %w", req.GetClientId(), req.GetSeq(), err)
	}
	return v != nil, nil
}

// dedupBegin records the client as active and returns the stored result
// (done = true) when the request was applied before or is older than what
// the client said it has seen answered.
func dedupBegin(rw engine.ReadWriter, req *wire.RequestID, now int64, cc *clientCache) (*wire.Result, bool, error) {
	client := req.ClientId
	rec, found, err := cc.load(rw, client)
	if err != nil {
		return nil, false, err
	}
	// NB: last use never goes backwards, even if a new leader's clock is
	// behind the old one's, so the idle index has one entry per client.
	// NB: last use is kept to the minute. Each change moves the client's
	// idle-index key, leaving a tombstone that expiry scans walk over;
	// per-command precision made that quadratic (found by govfs bench).
	use := max(rec.lastUse, timeKey(now-now%idleQuantumNs))
	if !found {
		// New here: every answer it will have here is tracked.
		rec.tracked = true
	}
	if !found || use != rec.lastUse {
		if found {
			if err := rw.Delete(idleKey(rec.lastUse, client)); err != nil {
				return nil, false, fmt.Errorf("namespace: delete idle entry: %w", err)
			}
		}
		if err := rw.Set(idleKey(use, client), nil); err != nil {
			return nil, false, fmt.Errorf("namespace: set idle entry: %w", err)
		}
		rec.lastUse = use
		if err := cc.store(rw, client, rec); err != nil {
			return nil, false, err
		}
	}
	if req.Seq < rec.watermark {
		// A delayed copy of a request whose answer was dropped: applying it
		// again would break exactly-once, and nobody waits for it.
		return &wire.Result{Errno: uint32(syscall.EINVAL), Message: fmt.Sprintf(
			"namespace: request %d/%d is older than the client's acknowledged requests (%d)", client, req.Seq, rec.watermark)}, true, nil
	}
	if _, held := slices.BinarySearch(rec.held, req.Seq); rec.tracked && !held {
		// The record lists every answer held here: no need to look for
		// one in the store (a point read of an absent key, 10-16 us of
		// every command in govfs bench meta).
		return nil, false, nil
	}
	v, err := rw.Get(resultKey(client, req.Seq))
	if err != nil {
		return nil, false, fmt.Errorf("namespace: get result %d/%d: %w", client, req.Seq, err)
	}
	if v == nil {
		return nil, false, nil
	}
	res := &wire.Result{}
	if err := proto.Unmarshal(v, res); err != nil {
		return nil, false, fmt.Errorf("namespace: corrupt result %d/%d: %w", client, req.Seq, err)
	}
	return res, true, nil
}

// dedupFinish stores the result of a newly applied request and drops the
// client's answers below max(first_incomplete, seq-window).
func dedupFinish(rw engine.ReadWriter, req *wire.RequestID, res *wire.Result, cc *clientCache) error {
	client := req.ClientId
	v, err := marshal(res)
	if err != nil {
		return err
	}
	if err := rw.Set(resultKey(client, req.Seq), v); err != nil {
		return fmt.Errorf("namespace: set result %d/%d: %w", client, req.Seq, err)
	}
	bound := req.FirstIncomplete
	if req.Seq > dedupWindow {
		bound = max(bound, req.Seq-dedupWindow)
	}
	bound = min(bound, req.Seq) // never drop the answer just stored
	rec, _, err := cc.load(rw, client)
	if err != nil {
		return err
	}
	if bound > rec.watermark {
		if rec.tracked {
			n := 0
			for _, s := range rec.held {
				if s >= bound {
					break
				}
				if err := rw.Delete(resultKey(client, s)); err != nil {
					return fmt.Errorf("namespace: delete result: %w", err)
				}
				n++
			}
			rec.held = rec.held[n:]
		} else {
			// NB: blind point deletes of the (usually few) dropped
			// answers: no range tombstone per command, and no iterator
			// (a scan per command was a visible share of apply CPU in
			// govfs bench meta). A client whose watermark jumps far
			// ahead has at most dedupWindow answers stored below the
			// new bound, all within [bound-dedupWindow, bound).
			from := rec.watermark
			if bound-from > dedupWindow {
				from = bound - dedupWindow
			}
			for s := from; s < bound; s++ {
				if err := rw.Delete(resultKey(client, s)); err != nil {
					return fmt.Errorf("namespace: delete result: %w", err)
				}
			}
		}
		rec.watermark = bound
	}
	rec.hold(req.Seq)
	return cc.store(rw, client, rec)
}

// expireClients forgets up to maxExpirePerApply clients whose last request
// is more than clientIdleNs older than now (command time).
func expireClients(rw engine.ReadWriter, now int64) error {
	if now < math.MinInt64+clientIdleNs {
		return nil
	}
	// Run at most once per quantum of command time.
	q := timeKey(now - now%idleQuantumNs)
	if v, err := rw.Get(expiryKey); err != nil {
		return fmt.Errorf("namespace: get expiry mark: %w", err)
	} else if len(v) == 8 && binary.BigEndian.Uint64(v) >= q {
		return nil
	}
	if err := rw.Set(expiryKey, binary.BigEndian.AppendUint64(nil, q)); err != nil {
		return fmt.Errorf("namespace: set expiry mark: %w", err)
	}
	lower := []byte{kindIdle}
	upper := u64Key(kindIdle, timeKey(now-clientIdleNs))
	var idle [][]byte
	err := rw.Scan(lower, upper, func(k, _ []byte) bool {
		idle = append(idle, slices.Clone(k))
		return len(idle) < maxExpirePerApply
	})
	if err != nil {
		return fmt.Errorf("namespace: scan idle clients: %w", err)
	}
	for _, k := range idle {
		if len(k) != 17 {
			return fmt.Errorf("namespace: corrupt idle key %x", k)
		}
		client := binary.BigEndian.Uint64(k[9:])
		p := resultPrefix(client)
		if err := rw.DeleteRange(p, prefixEnd(p)); err != nil {
			return fmt.Errorf("namespace: forget client %d: %w", client, err)
		}
		if err := rw.Delete(clientKey(client)); err != nil {
			return fmt.Errorf("namespace: forget client %d: %w", client, err)
		}
		if err := rw.Delete(reserveKey(client)); err != nil {
			return fmt.Errorf("namespace: forget client %d: %w", client, err)
		}
		if err := rw.Delete(k); err != nil {
			return fmt.Errorf("namespace: forget client %d: %w", client, err)
		}
	}
	return nil
}
