package infer

import (
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
)

// referenceCandidates is the filtering written plainly, in float64, as transformers' warpers
// describe it: every score sorted; top-k keeps the scores at least the k-th largest; top-p sorts
// the softmax ascending (ties: the higher id first) and drops a token while the running sum, itself
// included, is at most 1-p, never the last. It returns each kept token's probability.
func referenceCandidates(logits []float32, s Sampling) map[int]float64 {
	scores := make([]float64, len(logits))
	for i, v := range logits {
		scores[i] = float64(v) / s.Temperature
	}
	kept := map[int]bool{}
	for i := range scores {
		kept[i] = true
	}
	if s.TopK > 0 && s.TopK < len(scores) {
		sorted := slices.Clone(scores)
		sort.Sort(sort.Reverse(sort.Float64Slice(sorted)))
		for i, v := range scores {
			if v < sorted[s.TopK-1] {
				delete(kept, i)
			}
		}
	}
	softmax := func() map[int]float64 {
		top := math.Inf(-1)
		for i := range kept {
			top = math.Max(top, scores[i])
		}
		sum := 0.0
		for i := range kept {
			sum += math.Exp(scores[i] - top)
		}
		p := map[int]float64{}
		for i := range kept {
			p[i] = math.Exp(scores[i]-top) / sum
		}
		return p
	}
	probs := softmax()
	if s.TopP > 0 && s.TopP < 1 {
		var order []int
		for i := range kept {
			order = append(order, i)
		}
		sort.Slice(order, func(a, b int) bool {
			if probs[order[a]] != probs[order[b]] {
				return probs[order[a]] < probs[order[b]]
			}
			return order[a] > order[b]
		})
		cum := 0.0
		for _, i := range order[:len(order)-1] {
			cum += probs[i]
			if cum <= 1-s.TopP {
				delete(kept, i)
			}
		}
		probs = softmax()
	}
	return probs
}

// randomLogits are n logits of spread about 3, rounded to quarters so that some are equal.
func randomLogits(r *rand.Rand, n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(math.Round(r.NormFloat64()*3*4) / 4)
	}
	return out
}

// TestCandidatesAreTheReferenceFiltering: the tokens a draw chooses from and their probabilities
// are the plain float64 reference's (within 1e-12), for temperatures, top-k (ties at the k-th
// kept) and top-p (the unsorted shortcut for unlikely tokens included), on logits with ties.
func TestCandidatesAreTheReferenceFiltering(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 6 {
		logits := randomLogits(r, 1000)
		for _, temperature := range []float64{0.7, 1, 1.3} {
			for _, k := range []int{0, 1, 7, 50, 1000, 2000} {
				for _, p := range []float64{0, 0.2, 0.9, 0.999, 1} {
					s := Sampling{Temperature: temperature, TopK: k, TopP: p}
					ids, probs := newSampler(s).candidates(logits)
					want := referenceCandidates(logits, s)
					if !sort.IntsAreSorted(ids) || len(ids) != len(want) {
						t.Fatalf("trial %d, %+v: %d candidates (sorted: %v), the reference keeps %d", trial, s, len(ids), sort.IntsAreSorted(ids), len(want))
					}
					for j, id := range ids {
						if w, ok := want[id]; !ok || math.Abs(probs[j]-w) > 1e-12 {
							t.Fatalf("trial %d, %+v: token %d has probability %g, the reference %g (kept: %v)", trial, s, id, probs[j], w, ok)
						}
					}
				}
			}
		}
	}
}

// TestDrawsFollowTheProbabilities: 10000 draws with one seed land on each candidate as often as its
// probability says (within 5 standard deviations) and never outside the candidates; greedy takes
// the lowest id among equal maxima; NaN logits are an error.
func TestDrawsFollowTheProbabilities(t *testing.T) {
	logits := randomLogits(rand.New(rand.NewPCG(3, 4)), 300)
	s := Sampling{Temperature: 1.2, TopK: 40, TopP: 0.9, Seed: 5}
	want := referenceCandidates(logits, s)
	sm := newSampler(s)
	const n = 10000
	counts := map[int]int{}
	for range n {
		tok, err := sm.next(logits)
		if err != nil {
			t.Fatal(err)
		}
		counts[int(tok)]++
	}
	for id, c := range counts {
		if _, ok := want[id]; !ok {
			t.Errorf("token %d drawn %d times, outside the %d candidates", id, c, len(want))
		}
	}
	for id, p := range want {
		f := float64(counts[id]) / n
		if sigma := math.Sqrt(p * (1 - p) / n); math.Abs(f-p) > 5*sigma+1e-4 {
			t.Errorf("token %d drawn with frequency %.4f, probability %.4f (sigma %.4f)", id, f, p, sigma)
		}
	}
	greedy := newSampler(Sampling{})
	if tok, _ := greedy.next([]float32{1, 3, -2, 3, 0}); tok != 1 {
		t.Errorf("greedy over [1 3 -2 3 0] took %d, want 1 (the lowest id among equal maxima)", tok)
	}
	if _, err := greedy.next([]float32{1, float32(math.NaN())}); err == nil || !strings.Contains(err.Error(), "NaN") {
		t.Errorf("NaN logits: %v", err)
	}
}

// TestBucket: powers of two from the least, capped at the limit.
func TestBucket(t *testing.T) {
	for _, c := range []struct{ n, least, limit, want int }{
		{1, 16, 128, 16}, {16, 16, 128, 16}, {17, 16, 128, 32}, {100, 64, 128, 128}, {100, 64, 24, 24}, {129, 64, 4096, 256},
	} {
		if got := bucket(c.n, c.least, c.limit); got != c.want {
			t.Errorf("bucket(%d, %d, %d) = %d, want %d", c.n, c.least, c.limit, got, c.want)
		}
	}
}
