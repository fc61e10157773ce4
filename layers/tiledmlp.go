package layers

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/remat"
)

// DefaultMLPChunk is the chunk ParseMLP gives "chunked": 512 positions of each sequence, a
// quarter of Llama-3.1-8B's [2, 2048, 14336] intermediate values at sequence 2048.
const DefaultMLPChunk = 512

// MLP says how a model's MLP computes: the whole sequence at once (the zero value), or Chunk
// positions of each sequence at a time (TiledBranch). The MLP is position-wise, so the values
// are the same; what changes is what is alive at once: an MLP's intermediate values
// ([batch, seq, intermediate], several of them in its backward pass) are its largest, beside
// the blocked copies and float32 accumulator of each product on the embedded backend.
type MLP struct {
	// Chunk is the number of positions per chunk; 0 is the whole sequence.
	Chunk int
}

// ParseMLP reads "plain", "chunked" (DefaultMLPChunk) or "chunked=CHUNK".
func ParseMLP(s string) (MLP, error) {
	chunk, err := parseChunk(s, "mlp", DefaultMLPChunk)
	return MLP{Chunk: chunk}, err
}

// String is the form ParseMLP reads.
func (m MLP) String() string { return chunkString(m.Chunk) }

// Validate returns an error for a negative chunk.
func (m MLP) Validate() error {
	if m.Chunk < 0 {
		return fmt.Errorf("mlp chunk %d: must be positive (0 is the whole sequence)", m.Chunk)
	}
	return nil
}

const mlpParam = "layers_mlp"

// SetMLP sets how the MLPs in ctx's scope and below compute (the branches TiledBranch wraps).
func SetMLP(ctx *context.Context, m MLP) { ctx.SetParam(mlpParam, m) }

// MLPOf returns the MLP set on ctx's scope or above; the whole sequence when none was set.
func MLPOf(ctx *context.Context) MLP {
	return context.GetParamOr(ctx, mlpParam, MLP{})
}

// Branch is a model's branch: its outputs from its inputs, the first of them the hidden states.
type Branch = func(ctx *context.Context, in []*graph.Node) []*graph.Node

// TiledBranch returns fn computed MLPOf(ctx).Chunk positions at a time when the context asks for
// it (and the sequence is longer than the chunk), fn itself otherwise. fn must be position-wise:
// its one input and one output [batch, seq, ...], each position's output computed from that
// position's input alone (an MLP with its norm; not dropout, whose draws depend on the shape).
// Each chunk is rematerialized (remat.CheckpointCtx, named after its scope and chunk): the
// backward pass recomputes one chunk at a time, so that one chunk's intermediate values are alive
// at once, forward and backward, inside a rematerialized block or not; the chunks are chained (a
// chunk's input tied to the previous chunk's output; in the backward pass, a chunk's cotangent to
// the gradient of the next chunk's input) so that XLA runs them in order, and their outputs are
// joined along the sequence.
func TiledBranch(fn Branch) Branch {
	return func(ctx *context.Context, in []*graph.Node) []*graph.Node {
		chunk := MLPOf(ctx).Chunk
		if chunk == 0 || len(in) != 1 || in[0].Rank() < 3 || in[0].Shape().Dim(1) <= chunk {
			return fn(ctx, in)
		}
		x := in[0]
		chunks := spans(x.Shape().Dim(1), chunk)
		outs := make([]*graph.Node, len(chunks))
		// inGrads[i] is the gradient of chunk i's input, once the backward pass has built it: the
		// backward pass builds the last chunk's first (autodiff goes in reverse order of creation),
		// and each chunk's recomputation waits for the gradient of the chunk after it, so that XLA
		// too recomputes one chunk at a time (their cotangents all exist at once).
		inGrads := make([]*graph.Node, len(chunks))
		for i, s := range chunks {
			c := ctx
			var prev *graph.Node
			if i > 0 {
				c, prev = ctx.Reuse(), outs[i-1] // the first chunk created the variables
			}
			xi := graph.IdentityWithCustomGradient(after(sliceAxis(x, 1, s), prev), func(_, v *graph.Node) *graph.Node {
				inGrads[i] = v
				return v
			})
			ys := remat.Config{}.Named(fmt.Sprintf("%s/chunk_%d", ctx.Scope(), i)).CheckpointCtx(c, fn, xi)
			if len(ys) != 1 {
				panic(fmt.Sprintf("layers.TiledBranch(%s): the branch returned %d outputs, want 1", ctx.Scope(), len(ys)))
			}
			outs[i] = ys[0]
			if i+1 < len(chunks) {
				outs[i] = graph.IdentityWithCustomGradient(ys[0], func(_, v *graph.Node) *graph.Node { return after(v, inGrads[i+1]) })
			}
		}
		return []*graph.Node{concatenate(outs, 1)}
	}
}
