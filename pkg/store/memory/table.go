package memory

import (
	"math"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
)

// bucketTable maps counter keys to token-bucket TATs. It is an
// open-addressing hash table with linear probing, kept between 3/16 and 3/4
// full, because token buckets are the hot path: a lookup touches one cache
// line, an update happens in place, and sweeping walks the slots in order
// instead of starting a map iteration. Key 0 marks an empty slot; Store.key
// never returns it.
type bucketTable struct {
	slots []bucketSlot // length 0 or a power of two
	n     int          // occupied slots
	hand  int          // next slot the sweep examines
	// floor is at most the TAT of every entry, so that a sweep before it
	// has nothing to find and touches no slot: while every bucket is in
	// use, as under steady traffic, sweeping costs nothing. next collects
	// the floor for the end of the sweep's current pass over the slots:
	// the least TAT the hand has passed, or that was stored lower or moved
	// since the pass began.
	floor, next int64
}

type bucketSlot struct {
	key uint64
	tat int64 // the TAT, also the counter's expiry
}

const minTableSlots = 16

// find returns the slot holding key, or the empty slot where it would go,
// and whether key is present. The table must have slots.
func (t *bucketTable) find(key uint64) (int, bool) {
	mask := len(t.slots) - 1
	for i := int(key) & mask; ; i = (i + 1) & mask {
		switch t.slots[i].key {
		case key:
			return i, true
		case 0:
			return i, false
		}
	}
}

// get returns the TAT of key and whether key is present.
func (t *bucketTable) get(key uint64) (int64, bool) {
	if i, ok := t.lookup(key); ok {
		return t.slots[i].tat, true
	}
	return 0, false
}

// lookup returns the slot holding key and true, or false if key is absent.
func (t *bucketTable) lookup(key uint64) (int, bool) {
	if t.n == 0 {
		return 0, false
	}
	return t.find(key)
}

// put sets the TAT of key, adding key if it is absent.
func (t *bucketTable) put(key uint64, tat int64) {
	if len(t.slots) == 0 || (t.n+1)*4 > len(t.slots)*3 {
		t.resize(max(minTableSlots, 2*len(t.slots)))
	}
	i, ok := t.find(key)
	if !ok {
		t.slots[i] = bucketSlot{key: key, tat: math.MaxInt64}
		t.n++
	}
	t.set(i, tat)
}

// set sets the TAT of the entry in slot i.
func (t *bucketTable) set(i int, tat int64) {
	if tat < t.slots[i].tat {
		t.lower(tat)
	}
	t.slots[i].tat = tat
}

// lower keeps floor and next at most tat, a TAT stored or moved.
func (t *bucketTable) lower(tat int64) {
	t.floor = min(t.floor, tat)
	t.next = min(t.next, tat)
}

// remove deletes key if it is present.
func (t *bucketTable) remove(key uint64) {
	if t.n == 0 {
		return
	}
	if i, ok := t.find(key); ok {
		t.removeAt(i)
	}
}

// removeAt empties slot i and shifts later slots of its probe run back so
// that every key stays reachable from its home slot without tombstones.
func (t *bucketTable) removeAt(i int) {
	mask := len(t.slots) - 1
	for j := (i + 1) & mask; t.slots[j].key != 0; j = (j + 1) & mask {
		// The entry at j may move to i if i lies on its probe path, that is
		// cyclically within [home, j).
		home := int(t.slots[j].key) & mask
		if (j-home)&mask >= (j-i)&mask {
			t.slots[i] = t.slots[j]
			t.lower(t.slots[j].tat) // it may move behind the hand
			i = j
		}
	}
	t.slots[i] = bucketSlot{}
	t.n--
}

// sweep examines n slots from the hand onwards, deleting expired entries,
// unless no entry can have expired, and shrinks a table that has become
// mostly empty.
func (t *bucketTable) sweep(now int64, n int) {
	if t.n == 0 {
		return
	}
	mask := len(t.slots) - 1
	for ; n > 0 && t.n > 0 && now >= t.floor; n-- {
		i := t.hand & mask
		if s := t.slots[i]; s.key != 0 {
			if s.tat <= now {
				t.removeAt(i) // a later entry may have moved into i: look again
				continue
			}
			t.next = min(t.next, s.tat)
		}
		if t.hand = (t.hand + 1) & mask; t.hand == 0 {
			// A pass is complete: every entry was passed, stored or moved
			// during it.
			t.floor, t.next = t.next, math.MaxInt64
		}
	}
	if len(t.slots) > minTableSlots && t.n*16 < len(t.slots)*3 {
		t.resize(len(t.slots) / 2)
	}
}

// resize rehashes the table into size slots.
func (t *bucketTable) resize(size int) {
	old := t.slots
	t.slots = make([]bucketSlot, size)
	t.hand = 0
	t.floor, t.next = math.MaxInt64, math.MaxInt64
	for _, s := range old {
		if s.key != 0 {
			i, _ := t.find(s.key)
			t.slots[i] = s
			t.floor = min(t.floor, s.tat)
		}
	}
}

// sample adds up to evictSample entries to c, scanning from slot start
// and at most 4·evictSample slots (more while c holds nothing, so that an
// eviction always finds something), deleting the expired ones.
func (t *bucketTable) sample(start int, now int64, c *candidate) {
	if t.n == 0 {
		return
	}
	mask := len(t.slots) - 1
	i := start & mask
	for scanned := 0; (scanned < 4*evictSample || c.sampled == 0) && c.sampled < evictSample && t.n > 0; scanned++ {
		s := t.slots[i]
		if s.key == 0 {
			i = (i + 1) & mask
			continue
		}
		c.sampled++
		if s.tat <= now {
			t.removeAt(i) // look at i again
			c.expired++
			continue
		}
		c.consider(algorithm.TokenBucket, s.key, s.tat)
		i = (i + 1) & mask
	}
}
