package layers_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/layers"
)

// TestKVCacheWrite: Write puts each step's key and value at its position, bit for bit, leaves
// every other entry as it was, and writes nothing for a position outside the cache (-1: padding),
// against a plain loop over the entries; on every backend.
func TestKVCacheWrite(t *testing.T) {
	const batch, steps, length, heads, dim = 2, 3, 8, 2, 4
	positions := [][]int32{{2, 3, 4}, {7, -1, 0}}
	for _, backend := range testkit.All() {
		rng := rand.New(rand.NewPCG(5, 6)) // a tensor serves one backend: the same values for each
		cache, keys := randomTensor(rng, batch, length, heads, dim), randomTensor(rng, batch, steps, heads, dim)
		outs := graph.MustExecOnceN(backend, func(c, k, p *graph.Node) []*graph.Node {
			w := layers.KVCache{Keys: c, Values: graph.Neg(c)}.Write(k, graph.Neg(k), p)
			return []*graph.Node{w.Keys, w.Values}
		}, cache, keys, tensors.FromValue(positions))
		got, gotValues := outs[0].Value().([][][][]float64), outs[1].Value().([][][][]float64)
		want := cache.Value().([][][][]float64)
		k := keys.Value().([][][][]float64)
		for b := range batch {
			for j := range length {
				entry := want[b][j]
				for s, p := range positions[b] {
					if int(p) == j {
						entry = k[b][s]
					}
				}
				for h := range heads {
					for d := range dim {
						if got[b][j][h][d] != entry[h][d] || gotValues[b][j][h][d] != -entry[h][d] {
							t.Fatalf("%s: row %d entry %d: keys %v, values %v, want %v and its negation", backend.Name(), b, j, got[b][j], gotValues[b][j], entry)
						}
					}
				}
			}
		}
	}
}

// TestCachedAttentionIsPlainAttention: queries of a step at their positions against a cache
// holding the sequence's keys and values (and junk beyond it) give PlainAttention's values of the
// whole sequence at those positions, grouped heads included (float64, within 1e-12); a query at
// position -1 reads nothing and stays finite.
func TestCachedAttentionIsPlainAttention(t *testing.T) {
	const batch, seq, length, heads, kvHeads, dim = 2, 6, 8, 4, 2, 4
	rng := rand.New(rand.NewPCG(7, 8))
	q, k, v := randomTensor(rng, batch, seq, heads, dim), randomTensor(rng, batch, length, kvHeads, dim), randomTensor(rng, batch, length, kvHeads, dim)
	outs := graph.MustExecOnceN(testkit.Embedded(), func(q, k, v *graph.Node) []*graph.Node {
		full := layers.PlainAttention(q, graph.Slice(k, graph.AxisRange(), graph.AxisRange(0, seq)), graph.Slice(v, graph.AxisRange(), graph.AxisRange(0, seq)), dtypes.Float64)
		// The step: positions 3 and 5 of row 0, 0 and -1 (padding) of row 1.
		step := graph.Stack([]*graph.Node{
			graph.Concatenate([]*graph.Node{graph.Slice(q, graph.AxisElem(0), graph.AxisRange(3, 4)), graph.Slice(q, graph.AxisElem(0), graph.AxisRange(5, 6))}, 1),
			graph.Concatenate([]*graph.Node{graph.Slice(q, graph.AxisElem(1), graph.AxisRange(0, 1)), graph.Slice(q, graph.AxisElem(1), graph.AxisRange(0, 1))}, 1),
		}, 0)
		step = graph.Reshape(step, batch, 2, heads, dim)
		positions := graph.Const(q.Graph(), [][]int32{{3, 5}, {0, -1}})
		return []*graph.Node{full, layers.CachedAttention(step, k, v, positions, dtypes.Float64)}
	}, q, k, v)
	full, cached := outs[0].Value().([][][][]float64), outs[1].Value().([][][][]float64)
	for _, c := range []struct{ b, s, pos int }{{0, 0, 3}, {0, 1, 5}, {1, 0, 0}} {
		for h := range heads {
			for d := range dim {
				if diff := math.Abs(cached[c.b][c.s][h][d] - full[c.b][c.pos][h][d]); diff > 1e-12 {
					t.Fatalf("row %d position %d head %d: cached %v, plain %v", c.b, c.pos, h, cached[c.b][c.s][h], full[c.b][c.pos][h])
				}
			}
		}
	}
	for h := range heads {
		for d := range dim {
			if x := cached[1][1][h][d]; math.IsNaN(x) || math.IsInf(x, 0) {
				t.Fatalf("a padding query's values: %v", cached[1][1])
			}
		}
	}
}
