package top

import (
	"hash/maphash"
	"slices"
	"strings"
)

// spaceSaving is the Space-Saving summary (Metwally, Agrawal and El
// Abbadi, 2005) of the interval being recorded, with weights: k counters;
// a value not counted takes the smallest counter's place, with that
// counter's count as its error. Counts add up to total, so the smallest
// is at most total/k, and no count overstates by more.
//
// Counters are slots that keep their place; a min-heap of slot numbers
// finds the smallest, and an open-addressed table of slot numbers, at
// most half full, finds a value's slot by its hash. An update costs a
// hash, a probe or two and O(log k) moves of int32s; a value is copied
// only when it takes a slot.
type spaceSaving struct {
	k     int
	seed  maphash.Seed
	table []int32 // slot number + 1, or 0 for none; linear probing
	mask  uint64  // len(table) - 1
	slots []ssSlot
	heap  []int32 // slot numbers, a min-heap by count
	total uint64
}

type ssSlot struct {
	key   string
	hash  uint64
	count uint64
	err   uint64 // the count the slot had when key took it
	pos   int32  // the slot's place in heap
}

func newSpaceSaving(k int, seed maphash.Seed) *spaceSaving {
	return &spaceSaving{k: k, seed: seed}
}

// find returns the slot of key, whose hash is h, or -1.
func (s *spaceSaving) find(key []byte, h uint64) int32 {
	for i := h & s.mask; ; i = (i + 1) & s.mask {
		v := s.table[i]
		if v == 0 {
			return -1
		}
		if sl := &s.slots[v-1]; sl.hash == h && sl.key == string(key) {
			return v - 1
		}
	}
}

// place enters slot n, whose hash is h, in the table.
func (s *spaceSaving) place(n int32, h uint64) {
	i := h & s.mask
	for s.table[i] != 0 {
		i = (i + 1) & s.mask
	}
	s.table[i] = n + 1
}

// unplace removes slot n, whose hash is h, from the table, moving back
// the entries after it that probed past it (backward-shift deletion).
func (s *spaceSaving) unplace(n int32, h uint64) {
	i := h & s.mask
	for s.table[i] != n+1 {
		i = (i + 1) & s.mask
	}
	for j := (i + 1) & s.mask; s.table[j] != 0; j = (j + 1) & s.mask {
		home := s.slots[s.table[j]-1].hash & s.mask
		// The entry at j may move to i unless its home lies in (i, j].
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			s.table[i] = s.table[j]
			i = j
		}
	}
	s.table[i] = 0
}

// add counts w more for the value encoded in key, whose hash (with
// s.seed) is h; add does not keep key.
func (s *spaceSaving) add(key []byte, h uint64, w uint64) {
	s.total = satAdd(s.total, w)
	if s.table == nil {
		n := 1
		for n < 2*s.k {
			n <<= 1
		}
		s.table, s.mask = make([]int32, n), uint64(n-1)
		s.slots, s.heap = make([]ssSlot, 0, s.k), make([]int32, 0, s.k)
	}
	if i := s.find(key, h); i >= 0 {
		sl := &s.slots[i]
		sl.count = satAdd(sl.count, w)
		s.down(int(sl.pos))
		return
	}
	if len(s.slots) < s.k {
		i := int32(len(s.slots))
		s.slots = append(s.slots, ssSlot{key: string(key), hash: h, count: w, pos: int32(len(s.heap))})
		s.heap = append(s.heap, i)
		s.place(i, h)
		s.up(len(s.heap) - 1)
		return
	}
	i := s.heap[0]
	sl := &s.slots[i]
	s.unplace(i, sl.hash)
	sl.key, sl.hash = string(key), h
	sl.err = sl.count
	sl.count = satAdd(sl.count, w)
	s.place(i, h)
	s.down(0)
}

// min returns the smallest count when every counter is taken, else 0:
// the most any value not counted may have had.
func (s *spaceSaving) min() uint64 {
	if len(s.slots) < s.k {
		return 0
	}
	return s.slots[s.heap[0]].count
}

// finish returns the summary in Misra-Gries form (see summary): each
// counter less the smallest, delta the smallest, each lower bound its
// count less its error.
func (s *spaceSaving) finish() *summary {
	m := s.min()
	out := &summary{delta: m, total: s.total, entries: make([]entry, len(s.slots))}
	for i := range s.slots {
		sl := &s.slots[i]
		out.entries[i] = entry{key: sl.key, c: sl.count - m, lo: sl.count - sl.err}
	}
	slices.SortFunc(out.entries, func(a, b entry) int { return strings.Compare(a.key, b.key) })
	return out
}

// reset empties s, keeping its memory for the next interval.
func (s *spaceSaving) reset() {
	clear(s.table)
	clear(s.slots)
	s.slots = s.slots[:0]
	s.heap = s.heap[:0]
	s.total = 0
}

func (s *spaceSaving) less(a, b int) bool {
	return s.slots[s.heap[a]].count < s.slots[s.heap[b]].count
}

func (s *spaceSaving) swap(a, b int) {
	h := s.heap
	h[a], h[b] = h[b], h[a]
	s.slots[h[a]].pos = int32(a)
	s.slots[h[b]].pos = int32(b)
}

func (s *spaceSaving) up(j int) {
	for j > 0 {
		p := (j - 1) / 2
		if !s.less(j, p) {
			return
		}
		s.swap(j, p)
		j = p
	}
}

func (s *spaceSaving) down(j int) {
	n := len(s.heap)
	for {
		l := 2*j + 1
		if l >= n {
			return
		}
		c := l
		if r := l + 1; r < n && s.less(r, l) {
			c = r
		}
		if !s.less(c, j) {
			return
		}
		s.swap(j, c)
		j = c
	}
}
