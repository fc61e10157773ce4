package layers

import (
	"fmt"
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// ChunkedAttention is causal scaled dot-product attention computed in blocks of block queries and
// block keys, with memory linear in the sequence: no [seq, seq] array exists, forward or backward.
// It takes and returns what PlainAttention does (q [batch, seq, heads, headDim], k and v
// [batch, seq, kvHeads, headDim], output like q) and equals it to the rounding of softmaxDType.
//
// Each query block runs FlashAttention's online softmax over its key blocks: scores in
// softmaxDType, the running maximum, sum and weighted values in float32 (float64 for float64
// inputs) whatever the policy; blocks wholly above the diagonal are skipped, not computed and
// masked. Grouped-query heads share their key and value heads without copies (q is viewed as
// [batch, seq, kvHeads, group, headDim]). The backward pass is FlashAttention-2's: it keeps the
// output and one log-sum-exp per query row from the forward pass and recomputes each block's
// scores. The blocks are unrolled (GoMLX v0.26.0 has no loops) and chained by exact-zero ties, so
// that XLA runs them in order, frees each block's temporaries before the next one starts, and does
// not merge the backward pass's recomputation back into the forward pass.
//
// The cost of unrolling: with n = ceil(seq/block), n(n+1)/2 block pairs of about 70 graph nodes
// each (forward, backward and ties), and XLA's compile time grows with them (see Attention for
// measured trade-offs). block must be at least 1; seq need not be a multiple of it (the last block
// is shorter).
func ChunkedAttention(q, k, v *graph.Node, softmaxDType dtypes.DType, block int) *graph.Node {
	return ChunkedAttentionBlocks(q, k, v, softmaxDType, block, block)
}

// ChunkedAttentionBlocks is ChunkedAttention with separate query and key block sizes. A key block
// of at least seq is the queries-only scheme: each query block attends to its whole causal prefix
// at once, n blocks instead of n(n+1)/2 pairs, for scores of queryBlock x seq per head instead of
// queryBlock x keyBlock. At the same compile time, square blocks of a larger size needed less
// memory in every case measured (see Attention).
func ChunkedAttentionBlocks(q, k, v *graph.Node, softmaxDType dtypes.DType, queryBlock, keyBlock int) *graph.Node {
	return ChunkedAttentionSegments(q, k, v, softmaxDType, queryBlock, keyBlock, nil)
}

// ChunkedAttentionSegments is ChunkedAttentionBlocks of packed documents: a query attends only to
// the keys before it in its own segment, segments being integers [batch, seq]
// (Documents.Segments); nil segments are one segment a sequence. Each block's scores are masked by
// the segments of its queries and keys; no block is skipped for them (the segments are data, the
// blocks fixed when the graph is built).
func ChunkedAttentionSegments(q, k, v *graph.Node, softmaxDType dtypes.DType, queryBlock, keyBlock int, segments *graph.Node) *graph.Node {
	a := newBlockedAttention(q, k, v, softmaxDType, queryBlock, keyBlock)
	Documents{Segments: segments}.check("layers.ChunkedAttention", q)
	a.segments = segments
	value := a.forward()
	return withGradients("attention", []*graph.Node{q, k, v}, value, a.backward)
}

// blockedAttention holds one call's shapes, blocks and the forward values the backward pass reads.
type blockedAttention struct {
	q, k, v                    *graph.Node // the inputs, gradients stopped (the custom gradient owns them)
	batch, seq, kvHeads, group int
	headDim                    int
	scoresDType, stats         dtypes.DType
	scale                      float64
	queries                    []span
	keys                       [][]span      // the key blocks of each query block, clipped to the causal prefix
	logSumExp                  []*graph.Node // per query block: [batch, kvHeads, rows, group, 1] in stats
	queryShape                 shapes.Shape
	segments                   *graph.Node // [batch, seq] integers, or nil: one segment a sequence
}

func newBlockedAttention(q, k, v *graph.Node, softmaxDType dtypes.DType, queryBlock, keyBlock int) *blockedAttention {
	const fn = "layers.ChunkedAttention"
	checkAttentionHeads(fn, q, k, v)
	if !softmaxDType.IsFloat() {
		panic(fmt.Sprintf("%s: softmax dtype %s is not a floating-point dtype", fn, softmaxDType))
	}
	b, s, heads, d := q.Shape().Dim(0), q.Shape().Dim(1), q.Shape().Dim(2), q.Shape().Dim(3)
	kvHeads := k.Shape().Dim(2)
	if queryBlock < 1 || keyBlock < 1 {
		panic(fmt.Sprintf("%s: block sizes must be at least 1, got %d queries and %d keys", fn, queryBlock, keyBlock))
	}
	a := &blockedAttention{
		q: graph.Reshape(graph.StopGradient(q), b, s, kvHeads, heads/kvHeads, d), k: graph.StopGradient(k), v: graph.StopGradient(v),
		batch: b, seq: s, kvHeads: kvHeads, group: heads / kvHeads, headDim: d,
		scoresDType: softmaxDType, stats: statsDType(softmaxDType), scale: 1 / math.Sqrt(float64(d)),
		queries: spans(s, queryBlock), queryShape: q.Shape(),
	}
	for _, qs := range a.queries {
		var keys []span
		for _, ks := range spans(s, keyBlock) {
			if ks.start < qs.end { // blocks wholly above the diagonal are skipped
				keys = append(keys, span{ks.start, min(ks.end, qs.end)})
			}
		}
		a.keys = append(a.keys, keys)
	}
	return a
}

// queryBlock returns the queries of block i, scaled and in the scores' dtype: [b, rows, kvHeads, group, d].
func (a *blockedAttention) queryBlock(i int, deps ...*graph.Node) *graph.Node {
	qi := after(sliceAxis(a.q, 1, a.queries[i]), deps...)
	return graph.MulScalar(graph.ConvertDType(qi, a.scoresDType), a.scale)
}

// scores returns the block's scores [b, kvHeads, rows, group, keys] in the stats dtype, with the
// keys after each row's query masked (lowest finite value) where the block crosses the diagonal,
// and the keys of other segments than the row's.
func (a *blockedAttention) scores(qi, kj *graph.Node, qs, ks span) *graph.Node {
	s := graph.DotGeneral(qi, []int{4}, []int{0, 2}, graph.ConvertDType(kj, a.scoresDType), []int{3}, []int{0, 2})
	s = graph.ConvertDType(s, a.stats)
	g := s.Graph()
	lowest := graph.Scalar(g, a.stats, lowestFinite(a.stats))
	if ks.end-1 > qs.start { // some key follows some query
		dims := shapes.Make(dtypes.Int32, qs.len(), ks.len())
		// key position > query position  <=>  col - row > qs.start - ks.start
		offset := graph.Sub(graph.Iota(g, dims, 1), graph.Iota(g, dims, 0))
		future := graph.GreaterThan(offset, graph.Scalar(g, dtypes.Int32, qs.start-ks.start))
		bias := graph.Where(future, lowest, graph.ScalarZero(g, a.stats))
		s = graph.Add(s, graph.Reshape(bias, 1, 1, qs.len(), 1, ks.len()))
	}
	if a.segments != nil {
		same := sameSegment(sliceAxis(a.segments, 1, qs), sliceAxis(a.segments, 1, ks)) // [b, rows, keys]
		same = graph.BroadcastToDims(graph.Reshape(same, a.batch, 1, qs.len(), 1, ks.len()), s.Shape().Dimensions...)
		s = graph.Where(same, s, lowest)
	}
	return s
}

// forward returns the attention's output [b, seq, heads, d] in q's dtype and records each query
// block's log-sum-exp for the backward pass.
func (a *blockedAttention) forward() *graph.Node {
	outs := make([]*graph.Node, len(a.queries))
	var previous *graph.Node
	for i, qs := range a.queries {
		qi := a.queryBlock(i, previous)
		var m, l, acc *graph.Node // running max and sum [b, kvH, rows, group, 1], weighted values [b, kvH, rows, group, d]
		for j, ks := range a.keys[i] {
			kj := sliceAxis(a.k, 1, ks)
			if j > 0 {
				kj = after(kj, l, acc) // the previous block is done (its sum too): its temporaries are freed first
			}
			s := a.scores(qi, kj, qs, ks)
			blockMax := graph.ReduceAndKeep(s, graph.ReduceMax, -1)
			newMax := blockMax
			if m != nil {
				newMax = graph.Max(m, blockMax)
			}
			p := graph.Exp(graph.Sub(s, newMax))
			blockSum := graph.ReduceAndKeep(p, graph.ReduceSum, -1)
			pv := graph.DotGeneral(graph.ConvertDType(p, a.v.DType()), []int{4}, []int{0, 1}, sliceAxis(a.v, 1, ks), []int{1}, []int{0, 2})
			pv = graph.ConvertDType(pv, a.stats)
			if m == nil {
				l, acc = blockSum, pv
			} else {
				correction := graph.Exp(graph.Sub(m, newMax))
				l = graph.Add(graph.Mul(l, correction), blockSum)
				acc = graph.Add(graph.Mul(acc, correction), pv)
			}
			m = newMax
		}
		a.logSumExp = append(a.logSumExp, graph.Add(m, graph.Log(l)))
		out := graph.TransposeAllDims(graph.Div(acc, l), 0, 2, 1, 3, 4) // [b, rows, kvH, group, d]
		outs[i] = graph.ConvertDType(out, a.queryShape.DType)
		previous = outs[i]
	}
	return graph.Reshape(concatenate(outs, 1), a.queryShape.Dimensions...)
}

// backward returns the gradients of q, k and v for the output out and its cotangent dOut
// (FlashAttention-2: P = exp(S - lse), dV = Pᵀ·dO, dP = dO·Vᵀ, dS = P∘(dP - rowsum(dO∘O)),
// dQ = dS·K·scale, dK = dSᵀ·Q·scale), recomputing each block's scores.
func (a *blockedAttention) backward(out, dOut *graph.Node) []*graph.Node {
	b, kvH, group, d := a.batch, a.kvHeads, a.group, a.headDim
	o := graph.Reshape(graph.StopGradient(out), b, a.seq, kvH, group, d)
	dO := graph.Reshape(graph.ConvertDType(dOut, a.queryShape.DType), b, a.seq, kvH, group, d)
	keyBlocks := a.keys[len(a.keys)-1] // the last query block sees every key block, unclipped
	dK := make([]*graph.Node, len(keyBlocks))
	dV := make([]*graph.Node, len(keyBlocks))
	dQ := make([]*graph.Node, len(a.queries))
	chain := []*graph.Node{dOut} // the recomputation starts once the cotangent exists
	for i := len(a.queries) - 1; i >= 0; i-- {
		qs := a.queries[i]
		qi := a.queryBlock(i, chain...)
		dOi := sliceAxis(dO, 1, qs)
		// rowsum(dO∘O) [b, kvH, rows, group, 1]
		delta := graph.ReduceSum(graph.Mul(graph.ConvertDType(dOi, a.stats), graph.ConvertDType(sliceAxis(o, 1, qs), a.stats)), -1)
		delta = graph.Reshape(graph.TransposeAllDims(delta, 0, 2, 1, 3), b, kvH, qs.len(), group, 1)
		var dQi *graph.Node
		for j, ks := range a.keys[i] {
			// Keys and values both wait for the previous block: dO·Vᵀ needs nothing else, and
			// XLA would otherwise compute it for every block as soon as the cotangent exists.
			zero := zeroAfter(chain...)
			kj, vj := plus(sliceAxis(a.k, 1, ks), zero), plus(sliceAxis(a.v, 1, ks), zero)
			p := graph.Exp(graph.Sub(a.scores(qi, kj, qs, ks), a.logSumExp[i]))
			// dV_j += Pᵀ·dO_i [b, kvH, keys, d], in the values' dtype as the forward product
			dVij := graph.DotGeneral(graph.ConvertDType(p, a.v.DType()), []int{2, 3}, []int{0, 1}, dOi, []int{1, 3}, []int{0, 2})
			dP := graph.DotGeneral(dOi, []int{4}, []int{0, 2}, vj, []int{3}, []int{0, 2})
			dS := graph.ConvertDType(graph.Mul(p, graph.Sub(graph.ConvertDType(dP, a.stats), delta)), a.scoresDType)
			dQij := graph.DotGeneral(dS, []int{4}, []int{0, 1}, graph.ConvertDType(kj, a.scoresDType), []int{1}, []int{0, 2})
			dKij := graph.DotGeneral(dS, []int{2, 3}, []int{0, 1}, qi, []int{1, 3}, []int{0, 2})
			dQi = addOrSet(dQi, graph.ConvertDType(dQij, a.stats))
			dK[j] = addOrSet(dK[j], padKeys(graph.ConvertDType(dKij, a.stats), keyBlocks[j]))
			dV[j] = addOrSet(dV[j], padKeys(graph.ConvertDType(dVij, a.stats), keyBlocks[j]))
			chain = []*graph.Node{dQi, dK[j], dV[j]}
		}
		// [b, rows, kvH, group, d], in q's dtype at once: the finished blocks wait for the others
		dQ[i] = graph.ConvertDType(graph.TransposeAllDims(graph.MulScalar(dQi, a.scale), 0, 2, 1, 3, 4), a.queryShape.DType)
	}
	dq := graph.Reshape(concatenate(dQ, 1), a.queryShape.Dimensions...)
	// dK_j [b, kvH, keys, d] -> [b, seq, kvH, d]; it took the scale from the scaled queries
	dk := graph.TransposeAllDims(concatenate(dK, 2), 0, 2, 1, 3)
	dv := graph.TransposeAllDims(concatenate(dV, 2), 0, 2, 1, 3)
	return []*graph.Node{dq, dk, dv}
}

// padKeys extends a key block's gradient [b, kvH, keys, d], clipped to a query block's causal
// prefix, with zeros to the whole key block full.
func padKeys(x *graph.Node, full span) *graph.Node {
	missing := full.len() - x.Shape().Dim(2)
	if missing == 0 {
		return x
	}
	dims := x.Shape().Clone().Dimensions
	dims[2] = missing
	return graph.Concatenate([]*graph.Node{x, graph.Zeros(x.Graph(), shapes.Make(x.DType(), dims...))}, 2)
}
