package layers

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// How attention and the loss are computed is a choice of the run, not of the model: the models'
// attention layers and losses read it from the context (SetAttention, SetCrossEntropy), as their
// layers read the precision policy.

// DefaultCrossEntropyChunk is the chunk ParseCrossEntropy gives "chunked": 512 tokens' float32
// logits are 250 MiB at Llama 3's vocabulary of 128,256.
const DefaultCrossEntropyChunk = 512

// Attention says how the attention core computes: plainly, the whole [seq, seq] scores at once
// (the zero value), or chunked (ChunkedAttentionBlocks).
//
// Blocks trade memory for unrolled work, and XLA's compile time follows the work: Llama-3.2-1B's
// gradient step (bfloat16, remat of whole blocks, batch 1, XLA CPU plugin, compile only) at
// sequence 8192 needs 1.78 GiB of temporaries with block 1024 (36 block pairs per layer, 139 s of
// compile CPU time), 2.46 GiB with block 2048 (10 pairs, 28 s), 4.91 GiB with queries-only
// blocks of 512 (16 blocks, 62 s), and 24.4 GiB with plain attention (6 s). Left to choose
// (Chunked without a Block), it keeps the pairs per layer at most 36 (AutoAttentionBlock).
type Attention struct {
	// Chunked selects chunked attention.
	Chunked bool
	// Block is the number of queries and keys per block; 0 is AutoAttentionBlock(seq).
	Block int
	// KeyBlock, when set, is the number of keys per block instead of Block: at least the sequence
	// length gives the queries-only scheme (each query block reads its whole causal prefix at once).
	KeyBlock int
}

// AutoAttentionBlock is the block chunked attention uses when none is given: 1024, or seq/8 (up
// to a multiple of 128) when that is larger, so that a layer has at most 36 block pairs and the
// step compiles in bounded time; the scores of a block grow with it beyond sequence 8192
// (Llama-3.2-1B at 16384, block 2048: 2.90 GiB of temporaries, 264 s of compile CPU time).
func AutoAttentionBlock(seq int) int {
	return max(1024, (seq/8+127)/128*128)
}

// ParseAttention reads "plain", "chunked" (blocks chosen by AutoAttentionBlock), "chunked=BLOCK" or
// "chunked=QUERIESxKEYS" (e.g. "chunked=512x8192").
func ParseAttention(s string) (Attention, error) {
	kind, sizes, err := parseChunking(s, "attention", "plain|chunked[=BLOCK|=QUERIESxKEYS]")
	if err != nil || kind == "plain" {
		return Attention{}, err
	}
	a := Attention{Chunked: true}
	if sizes == "" {
		return a, nil
	}
	queries, keys, hasKeys := strings.Cut(sizes, "x")
	if a.Block, err = positive(queries, "attention block"); err != nil {
		return Attention{}, err
	}
	if hasKeys {
		if a.KeyBlock, err = positive(keys, "attention key block"); err != nil {
			return Attention{}, err
		}
	}
	return a, nil
}

// String is the form ParseAttention reads.
func (a Attention) String() string {
	switch {
	case !a.Chunked:
		return "plain"
	case a.Block == 0:
		return "chunked"
	case a.KeyBlock == 0 || a.KeyBlock == a.Block:
		return fmt.Sprintf("chunked=%d", a.Block)
	default:
		return fmt.Sprintf("chunked=%dx%d", a.Block, a.KeyBlock)
	}
}

// Validate returns an error naming a negative block, blocks without Chunked, or a key block
// without a block.
func (a Attention) Validate() error {
	if a.Block < 0 || a.KeyBlock < 0 || (!a.Chunked && a.Block+a.KeyBlock > 0) || (a.Block == 0 && a.KeyBlock != 0) {
		return fmt.Errorf("attention %+v: blocks must be positive, need Chunked, and a key block needs a block", a)
	}
	return nil
}

// Blocks returns the query and key blocks a uses at sequence length seq (0, 0 for plain).
func (a Attention) Blocks(seq int) (queries, keys int) {
	if !a.Chunked {
		return 0, 0
	}
	queries, keys = a.Block, a.KeyBlock
	if queries == 0 {
		queries = AutoAttentionBlock(seq)
	}
	if keys == 0 {
		keys = queries
	}
	return queries, keys
}

// Core returns the attention core a computes with: PlainAttention, or ChunkedAttentionBlocks with
// a's blocks. Its signature is GroupedQuery.Core's (and models.Llama's Attention).
func (a Attention) Core() func(q, k, v *graph.Node, softmaxDType dtypes.DType) *graph.Node {
	return a.SegmentCore(nil)
}

// SegmentCore is Core for packed documents: the core keeps each query within its segment
// (PlainAttentionSegments, ChunkedAttentionSegments); nil segments give Core.
func (a Attention) SegmentCore(segments *graph.Node) func(q, k, v *graph.Node, softmaxDType dtypes.DType) *graph.Node {
	if err := a.Validate(); err != nil {
		panic("layers.Attention.Core: " + err.Error())
	}
	if !a.Chunked {
		if segments == nil {
			return PlainAttention
		}
		return func(q, k, v *graph.Node, softmaxDType dtypes.DType) *graph.Node {
			return PlainAttentionSegments(q, k, v, softmaxDType, segments)
		}
	}
	return func(q, k, v *graph.Node, softmaxDType dtypes.DType) *graph.Node {
		queries, keys := a.Blocks(q.Shape().Dim(1))
		return ChunkedAttentionSegments(q, k, v, softmaxDType, queries, keys, segments)
	}
}

// CrossEntropy says how a model's loss computes its logits: all at once (the zero value), or Chunk
// tokens at a time (ChunkedCrossEntropySum).
type CrossEntropy struct {
	// Chunk is the number of tokens per chunk; 0 is the plain loss.
	Chunk int
}

// ParseCrossEntropy reads "plain", "chunked" (DefaultCrossEntropyChunk) or "chunked=CHUNK".
func ParseCrossEntropy(s string) (CrossEntropy, error) {
	chunk, err := parseChunk(s, "cross-entropy", DefaultCrossEntropyChunk)
	return CrossEntropy{Chunk: chunk}, err
}

// String is the form ParseCrossEntropy reads.
func (c CrossEntropy) String() string { return chunkString(c.Chunk) }

// parseChunk reads "plain" (0), "chunked" (def) or "chunked=CHUNK" for what ("cross-entropy").
func parseChunk(s, what string, def int) (int, error) {
	kind, size, err := parseChunking(s, what, "plain|chunked[=CHUNK]")
	switch {
	case err != nil || kind == "plain":
		return 0, err
	case size == "":
		return def, nil
	}
	chunk, err := positive(size, what+" chunk")
	if err != nil {
		return 0, err
	}
	return chunk, nil
}

// chunkString is the form parseChunk reads.
func chunkString(chunk int) string {
	if chunk == 0 {
		return "plain"
	}
	return fmt.Sprintf("chunked=%d", chunk)
}

// Validate returns an error for a negative chunk.
func (c CrossEntropy) Validate() error {
	if c.Chunk < 0 {
		return fmt.Errorf("cross-entropy chunk %d: must be positive (0 is the plain loss)", c.Chunk)
	}
	return nil
}

const (
	attentionParam    = "layers_attention"
	crossEntropyParam = "layers_cross_entropy"
)

// SetAttention sets how the attention layers in ctx's scope and below compute (CausalSelfAttention,
// and GroupedQueryAttention without a Core of its own).
func SetAttention(ctx *context.Context, a Attention) { ctx.SetParam(attentionParam, a) }

// AttentionOf returns the Attention set on ctx's scope or above; plain when none was set.
func AttentionOf(ctx *context.Context) Attention {
	return context.GetParamOr(ctx, attentionParam, Attention{})
}

// SetCrossEntropy sets how the losses of the models in ctx's scope compute their logits.
func SetCrossEntropy(ctx *context.Context, c CrossEntropy) { ctx.SetParam(crossEntropyParam, c) }

// CrossEntropyOf returns the CrossEntropy set on ctx's scope or above; plain when none was set.
func CrossEntropyOf(ctx *context.Context) CrossEntropy {
	return context.GetParamOr(ctx, crossEntropyParam, CrossEntropy{})
}

// parseChunking splits "plain" or "chunked[=SIZES]" into its kind and sizes.
func parseChunking(s, what, forms string) (kind, sizes string, err error) {
	kind, sizes, hasSizes := strings.Cut(strings.TrimSpace(s), "=")
	switch {
	case kind == "plain" && !hasSizes:
		return kind, "", nil
	case kind == "chunked" && (!hasSizes || sizes != ""):
		return kind, sizes, nil
	}
	return "", "", fmt.Errorf("%s %q: want %s", what, s, forms)
}

// positive parses a positive integer size.
func positive(s, what string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%s %q: want a positive number of tokens", what, s)
	}
	return n, nil
}
