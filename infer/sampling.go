package infer

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Sampling is how Generate chooses each token from the model's logits. The zero Sampling is
// greedy: the most likely token (the lowest id among equals), as transformers'
// generate(do_sample=False). With Temperature above 0 each token is drawn from the softmax of
// logits/Temperature, kept to the TopK most likely tokens and then to the most likely tokens
// whose probabilities reach TopP, in transformers' order (temperature, top-k, top-p), by a
// generator seeded with Seed: one seed, one sequence of tokens. The filtering and the draw run in
// float64 on the host.
type Sampling struct {
	// Temperature divides the logits before the softmax: below 1 sharpens, above 1 flattens; 0
	// (the default) is greedy.
	Temperature float64
	// TopK keeps the TopK most likely tokens (and any equal to the TopK-th); 0 keeps all.
	TopK int
	// TopP keeps the smallest set of most likely tokens whose probabilities sum to at least TopP
	// (nucleus sampling: a token is dropped when the tokens less likely than it, itself included,
	// sum to at most 1-TopP, as transformers' TopPLogitsWarper; the most likely one always stays);
	// 0 and 1 keep all.
	TopP float64
	// Seed seeds the draws (PCG): the same seed, model and prompt give the same tokens.
	Seed uint64
}

// Greedy reports whether s takes the most likely token instead of drawing one.
func (s Sampling) Greedy() bool { return s.Temperature == 0 }

// Validate returns an error naming the field that cannot work, and why.
func (s Sampling) Validate() error {
	switch {
	case !(s.Temperature >= 0) || math.IsInf(s.Temperature, 0):
		return fmt.Errorf("Sampling.Temperature = %g must be a finite number, 0 for greedy decoding or above 0 to sample", s.Temperature)
	case s.TopK < 0:
		return fmt.Errorf("Sampling.TopK = %d must be at least 0 (0 keeps every token)", s.TopK)
	case !(s.TopP >= 0 && s.TopP <= 1):
		return fmt.Errorf("Sampling.TopP = %g must be in [0, 1] (0 or 1 keeps every token)", s.TopP)
	case s.Greedy() && s.TopK > 0:
		return fmt.Errorf("Sampling.TopK = %d filters a draw, and Sampling.Temperature = 0 is greedy decoding, which draws nothing: set Sampling.Temperature above 0 (1 samples from the model's own distribution)", s.TopK)
	case s.Greedy() && s.TopP > 0 && s.TopP < 1:
		return fmt.Errorf("Sampling.TopP = %g filters a draw, and Sampling.Temperature = 0 is greedy decoding, which draws nothing: set Sampling.Temperature above 0 (1 samples from the model's own distribution)", s.TopP)
	}
	return nil
}

// sampler chooses tokens as a Sampling says, keeping its generator's state across a generation.
type sampler struct {
	s   Sampling
	rng *rand.Rand
	// Scratch, reused from token to token.
	scores []float64
	kept   []int
}

// newSampler returns the sampler of s (valid), its generator seeded with s.Seed.
func newSampler(s Sampling) *sampler {
	return &sampler{s: s, rng: rand.New(rand.NewPCG(s.Seed, 0x9e3779b97f4a7c15))}
}

// next returns the token chosen from one row of logits, or an error when the logits hold NaN.
func (sm *sampler) next(logits []float32) (int32, error) {
	for i, v := range logits {
		if v != v {
			return 0, fmt.Errorf("the model's logits are NaN (token %d of %d): its weights or the precision policy overflow", i, len(logits))
		}
	}
	if sm.s.Greedy() {
		return int32(argmax(logits)), nil
	}
	ids, probs := sm.candidates(logits)
	u := sm.rng.Float64()
	sum := 0.0
	for i, p := range probs {
		sum += p
		if u < sum {
			return int32(ids[i]), nil
		}
	}
	return int32(ids[len(ids)-1]), nil // u within rounding of 1
}

// argmax is the index of the largest value, the lowest among equals (torch.argmax's choice).
func argmax(values []float32) int {
	best := 0
	for i, v := range values {
		if v > values[best] {
			best = i
		}
	}
	return best
}

// candidates returns the tokens a draw chooses from, by increasing id, and their probabilities
// (summing to 1 within rounding): the softmax of logits/Temperature over the tokens top-k and
// top-p keep, in float64. The slices are the sampler's scratch, valid until the next call.
func (sm *sampler) candidates(logits []float32) (ids []int, probs []float64) {
	s := sm.s
	scores := slices.Grow(sm.scores[:0], len(logits))[:len(logits)]
	kept := sm.kept[:0]
	for i, v := range logits {
		scores[i] = float64(v) / s.Temperature
		kept = append(kept, i)
	}
	if s.TopK > 0 && s.TopK < len(logits) {
		threshold := kthLargest(scores, s.TopK)
		kept = slices.DeleteFunc(kept, func(i int) bool { return scores[i] < threshold })
	}
	// The softmax of the kept scores, in place of their scores.
	top := math.Inf(-1)
	for _, i := range kept {
		top = math.Max(top, scores[i])
	}
	total := 0.0
	for _, i := range kept {
		scores[i] = math.Exp(scores[i] - top)
		total += scores[i]
	}
	for _, i := range kept {
		scores[i] /= total
	}
	if s.TopP > 0 && s.TopP < 1 {
		kept = topP(kept, scores, s.TopP)
		total = 0
		for _, i := range kept {
			total += scores[i]
		}
		for _, i := range kept {
			scores[i] /= total
		}
	}
	sm.scores, sm.kept = scores, kept
	probs = make([]float64, len(kept))
	for j, i := range kept {
		probs[j] = scores[i]
	}
	return kept, probs
}

// kthLargest is the k-th largest of values (1 <= k <= len), found without sorting all of them.
func kthLargest(values []float64, k int) float64 {
	// A min-heap of the k largest seen so far: its root is their smallest.
	heap := make([]float64, 0, k)
	for _, v := range values {
		if len(heap) < k {
			heap = append(heap, v)
			for i := len(heap) - 1; i > 0 && heap[(i-1)/2] > heap[i]; i = (i - 1) / 2 {
				heap[i], heap[(i-1)/2] = heap[(i-1)/2], heap[i]
			}
			continue
		}
		if v <= heap[0] {
			continue
		}
		heap[0] = v
		for i := 0; ; {
			small, l, r := i, 2*i+1, 2*i+2
			if l < k && heap[l] < heap[small] {
				small = l
			}
			if r < k && heap[r] < heap[small] {
				small = r
			}
			if small == i {
				break
			}
			heap[i], heap[small] = heap[small], heap[i]
			i = small
		}
	}
	return heap[0]
}

// topP returns the ids of kept (increasing) that nucleus sampling keeps, given their
// probabilities probs[id]: in increasing order of probability (ties: the higher id first, so that
// the lower ids stay, as greedy prefers them), a token goes while the running sum, itself
// included, is at most 1-p; the most likely token always stays. Tokens of probability at most
// (1-p)/len(kept), within rounding, go without being sorted: all of them together sum to at most
// 1-p, and they come first.
func topP(kept []int, probs []float64, p float64) []int {
	drop := 1 - p
	surely := drop / float64(len(kept)) * (1 - 1e-9)
	var removed float64
	var rest []int
	for _, i := range kept {
		if probs[i] <= surely {
			removed += probs[i]
		} else {
			rest = append(rest, i)
		}
	}
	byProbability := slices.Clone(rest)
	slices.SortFunc(byProbability, func(a, b int) int {
		if probs[a] != probs[b] {
			if probs[a] < probs[b] {
				return -1
			}
			return 1
		}
		return b - a
	})
	gone := map[int]bool{}
	sum := removed
	for _, i := range byProbability[:len(byProbability)-1] {
		sum += probs[i]
		if sum > drop {
			break
		}
		gone[i] = true
	}
	return slices.DeleteFunc(rest, func(i int) bool { return gone[i] })
}
