package top

import (
	"hash/maphash"
	"time"
)

// The intervals summaries are kept for. Every one is aligned to the
// epoch, so the instances of a fleet cut their intervals at the same
// instants and their summaries merge window for window.
const (
	// slotLen is the interval of the summary being recorded.
	slotLen = 10 * time.Second
	// slotsPerMinute slots fold into a minute, minutesPerBlock minutes
	// into a block.
	slotsPerMinute  = 6
	minutesPerBlock = 5
	// keepSlots, keepMinutes and keepBlocks are how many finished slots,
	// minutes and blocks make the windows of a minute, five minutes and
	// an hour.
	keepSlots   = 6
	keepMinutes = 5
	keepBlocks  = 12
)

// pair is the summaries of one interval: of the requests and of the
// rejections.
type pair struct {
	req, rej *summary
}

// finished is the pair of a finished interval, by its number: the slot,
// minute or block since the epoch.
type finished struct {
	id int64
	pair
}

// ring is the summaries of one rule identity: the interval being
// recorded (live), the last finished slots, the minute and the block
// being filled (the merge of their finished slots and minutes), and the
// last finished minutes and blocks. The windows are
//
//	1m: live + the last 6 slots                     (60 to 70 s)
//	5m: live + the minute + the last 5 minutes      (300 to 360 s)
//	1h: live + the minute + the block + 12 blocks   (60 to 65 min)
//
// so a window covers at least its length and at most one of its steps
// more, counted exactly (see span).
type ring struct {
	k      int
	liveID int64 // the live slot's number
	live   pair0
	slots  []finished
	minute finished // id: the minute being filled; nil pair when empty
	mins   []finished
	block  finished // id: the block being filled
	blocks []finished
}

// pair0 is the live pair, as Space-Saving summaries.
type pair0 struct {
	req, rej *spaceSaving
}

// slotOf returns the slot number of t.
func slotOf(t time.Time) int64 { return floorDiv(t.UnixNano(), int64(slotLen)) }

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// advance finishes the live slot, and the minute and block being
// filled, when slot is past them.
func (r *ring) advance(slot int64) {
	if slot <= r.liveID {
		return
	}
	if r.live.req != nil && r.live.req.total > 0 {
		f := finished{id: r.liveID, pair: pair{req: r.live.req.finish(), rej: r.live.rej.finish()}}
		r.slots = append(r.slots, f)
		r.fold(f)
		r.live.req.reset()
		r.live.rej.reset()
	}
	r.liveID = slot
	r.slots = dropBefore(r.slots, slot-keepSlots)
	// The minute and block being filled end when slot is past them.
	minute := floorDiv(slot, slotsPerMinute)
	if r.minute.req != nil && r.minute.id < minute {
		r.mins = append(r.mins, r.minute)
		r.foldMinute(r.minute)
		r.minute = finished{}
	}
	r.mins = dropBefore(r.mins, minute-keepMinutes)
	block := floorDiv(minute, minutesPerBlock)
	if r.block.req != nil && r.block.id < block {
		r.blocks = append(r.blocks, r.block)
		r.block = finished{}
	}
	r.blocks = dropBefore(r.blocks, block-keepBlocks)
}

// fold adds a finished slot to the minute being filled, finishing that
// minute first if the slot is past it.
func (r *ring) fold(f finished) {
	minute := floorDiv(f.id, slotsPerMinute)
	if r.minute.req != nil && r.minute.id != minute {
		r.mins = append(r.mins, r.minute)
		r.foldMinute(r.minute)
		r.minute = finished{}
	}
	if r.minute.req == nil {
		r.minute = finished{id: minute, pair: f.pair}
		return
	}
	r.minute.pair = mergePairs(r.k, r.minute.pair, f.pair)
}

// foldMinute adds a finished minute to the block being filled,
// finishing that block first if the minute is past it.
func (r *ring) foldMinute(m finished) {
	block := floorDiv(m.id, minutesPerBlock)
	if r.block.req != nil && r.block.id != block {
		r.blocks = append(r.blocks, r.block)
		r.block = finished{}
	}
	if r.block.req == nil {
		r.block = finished{id: block, pair: m.pair}
		return
	}
	r.block.pair = mergePairs(r.k, r.block.pair, m.pair)
}

// record counts a decision in the live slot.
func (r *ring) record(key []byte, hits uint64, rejected bool) {
	if r.live.req == nil {
		seed := maphash.MakeSeed()
		r.live = pair0{req: newSpaceSaving(r.k, seed), rej: newSpaceSaving(r.k, seed)}
	}
	h := maphash.Bytes(r.live.req.seed, key)
	r.live.req.add(key, h, hits)
	if rejected {
		r.live.rej.add(key, h, hits)
	}
}

// windows returns, for every window, the pairs that make it once
// advanced to slot: new slices, the live pair finished into new
// summaries, the others shared, as finished summaries never change.
func (r *ring) windows(slot int64) [numWindows][]pair {
	var out [numWindows][]pair
	var live []pair
	if r.live.req != nil && r.liveID == slot && r.live.req.total > 0 {
		live = []pair{{req: r.live.req.finish(), rej: r.live.rej.finish()}}
	}
	var minute []pair
	if r.minute.req != nil {
		minute = []pair{r.minute.pair}
	}
	out[Minute] = make([]pair, 0, 1+len(r.slots))
	out[Minute] = append(out[Minute], live...)
	for _, f := range r.slots {
		out[Minute] = append(out[Minute], f.pair)
	}
	out[FiveMinutes] = make([]pair, 0, 2+len(r.mins))
	out[FiveMinutes] = append(append(out[FiveMinutes], live...), minute...)
	for _, f := range r.mins {
		out[FiveMinutes] = append(out[FiveMinutes], f.pair)
	}
	out[Hour] = make([]pair, 0, 3+len(r.blocks))
	out[Hour] = append(append(out[Hour], live...), minute...)
	if r.block.req != nil {
		out[Hour] = append(out[Hour], r.block.pair)
	}
	for _, f := range r.blocks {
		out[Hour] = append(out[Hour], f.pair)
	}
	return out
}

// windowStart returns the start of the oldest interval window w may
// cover at slot.
func windowStart(w Window, slot int64) time.Time {
	minute := floorDiv(slot, slotsPerMinute)
	switch w {
	case Minute:
		return slotStart(slot - keepSlots)
	case FiveMinutes:
		return slotStart((minute - keepMinutes) * slotsPerMinute)
	}
	block := floorDiv(minute, minutesPerBlock)
	return slotStart((block - keepBlocks) * minutesPerBlock * slotsPerMinute)
}

// empty reports whether r holds nothing at all.
func (r *ring) empty() bool {
	return (r.live.req == nil || r.live.req.total == 0) && len(r.slots) == 0 && r.minute.req == nil &&
		len(r.mins) == 0 && r.block.req == nil && len(r.blocks) == 0
}

// release drops everything r holds.
func (r *ring) release() {
	*r = ring{k: r.k}
}

func slotStart(slot int64) time.Time { return time.Unix(0, slot*int64(slotLen)) }

// dropBefore drops the intervals of fs numbered below id.
func dropBefore(fs []finished, id int64) []finished {
	n := 0
	for n < len(fs) && fs[n].id < id {
		n++
	}
	if n == 0 {
		return fs
	}
	m := copy(fs, fs[n:])
	clear(fs[m:])
	return fs[:m]
}

// mergePairs merges pairs, each summary pruned to k.
func mergePairs(k int, pairs ...pair) pair {
	reqs := make([]*summary, len(pairs))
	rejs := make([]*summary, len(pairs))
	for i, p := range pairs {
		reqs[i], rejs[i] = p.req, p.rej
	}
	return pair{req: merge(k, reqs...), rej: merge(k, rejs...)}
}
