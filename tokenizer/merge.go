package tokenizer

// merge is a merge's rank and the id of the token it makes.
type merge struct{ rank, id int32 }

// pairTable maps a pair of token ids to its merge: open addressing, linear probing.
type pairTable struct {
	keys []uint64 // a<<32 | b, plus one; 0 marks an empty slot
	vals []merge
	mask uint64
}

func newPairTable(n int) pairTable {
	size := 16
	for size < 2*n {
		size *= 2
	}
	return pairTable{keys: make([]uint64, size), vals: make([]merge, size), mask: uint64(size - 1)}
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

func (t *pairTable) slot(k uint64) uint64 {
	return (k * 0x9e3779b97f4a7c15) >> 32 & t.mask
}

// put sets the merge of a pair; a later merge of the same pair replaces an earlier one, as the
// reference's map does.
func (t *pairTable) put(a, b int32, m merge) {
	k := pairKey(a, b) + 1
	for i := t.slot(k); ; i = (i + 1) & t.mask {
		if t.keys[i] == 0 || t.keys[i] == k {
			t.keys[i], t.vals[i] = k, m
			return
		}
	}
}

func (t *pairTable) get(a, b int32) (merge, bool) {
	k := pairKey(a, b) + 1
	for i := t.slot(k); ; i = (i + 1) & t.mask {
		switch t.keys[i] {
		case k:
			return t.vals[i], true
		case 0:
			return merge{}, false
		}
	}
}

// candidate is a possible merge of the symbol at pos with its right neighbour into id.
type candidate struct{ rank, pos, id int32 }

// mergeHeap is a binary min-heap of candidates by (rank, pos). Equal keys are the same merge, so
// the order among them does not matter.
type mergeHeap []candidate

func (c candidate) less(o candidate) bool {
	return c.rank < o.rank || c.rank == o.rank && c.pos < o.pos
}

func (h *mergeHeap) push(c candidate) {
	*h = append(*h, c)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if !s[i].less(s[p]) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *mergeHeap) pop() candidate {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s = s[:n]
	for i := 0; ; {
		l, smallest := 2*i+1, i
		if l < n && s[l].less(s[smallest]) {
			smallest = l
		}
		if r := l + 1; r < n && s[r].less(s[smallest]) {
			smallest = r
		}
		if smallest == i {
			break
		}
		s[i], s[smallest] = s[smallest], s[i]
		i = smallest
	}
	*h = s
	return top
}
