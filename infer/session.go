package infer

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/internal/panics"
	"github.com/onegpu/onegpu/layers"
)

// A session is one generation's state on the device: the logits of the next token after the
// prompt, then after each token fed back. Its programs are compiled once per shape bucket and kept
// by the Generator across generations: a KV cache's length and the prompt's padded length are
// powers of two (capped at the model's positions), so that a step's program serves every step.
type session interface {
	// compile builds and compiles the programs a generation of total tokens after a prompt of
	// promptLen runs, so that timing leaves compilation out.
	compile(promptLen, total int) error
	// prefill reads the prompt and returns the logits [vocab] of the token after it.
	prefill(prompt []int32) ([]float32, error)
	// next reads one more token and returns the logits of the token after it.
	next(token int32) ([]float32, error)
	// close releases the session's device buffers (not the Generator's programs).
	close()
}

const (
	leastCache  = 64 // the shortest KV cache
	leastPrompt = 16 // the shortest padded prompt (or sequence, without a cache)
)

// bucket is the smallest power of two at least n and least, capped at limit.
func bucket(n, least, limit int) int {
	b := least
	for b < n {
		b *= 2
	}
	return min(b, limit)
}

// pick returns hidden [batch, length, width]'s rows at positions last [batch] (integers): [batch,
// width].
func pick(hidden, last *graph.Node) *graph.Node {
	batch := hidden.Shape().Dim(0)
	if hidden.Shape().Dim(1) == 1 {
		return graph.Reshape(hidden, batch, hidden.Shape().Dim(2))
	}
	rows := graph.Iota(hidden.Graph(), shapes.Make(dtypes.Int32, batch), 0)
	return graph.Gather(hidden, graph.Stack([]*graph.Node{rows, graph.ConvertDType(last, dtypes.Int32)}, -1))
}

// logitsOf runs exec on args and returns its first output, the logits [1, vocab], as a slice (and
// finalizes it), and the other outputs.
func logitsOf(exec *context.Exec, args ...any) ([]float32, []*tensors.Tensor, error) {
	var outs []*tensors.Tensor
	if err := panics.Catch(func() {
		var err error
		if outs, err = exec.Exec(args...); err != nil {
			panic(err)
		}
	}); err != nil {
		return nil, nil, err
	}
	logits := tensors.MustCopyFlatData[float32](outs[0])
	outs[0].FinalizeAll()
	return logits, outs[1:], nil
}

// precompile compiles exec for args, as panics.Catch reports a failure.
func precompile(exec *context.Exec, args ...any) error {
	return panics.Catch(func() {
		if err := exec.PreCompile(args...); err != nil {
			panic(err)
		}
	})
}

// ids returns tokens padded with pad to length, as a tensor [1, length].
func ids(tokens []int32, length int, pad int32) *tensors.Tensor {
	row := make([]int32, length)
	for i := range row {
		row[i] = pad
	}
	copy(row, tokens)
	return tensors.FromFlatDataAndDimensions(row, 1, length)
}

// cachedSession generates with a KV cache of length bucket(total): the prompt in one program
// (padded to a bucket; padding at position -1 reads and writes nothing), then one program a token.
type cachedSession struct {
	g      *Generator
	m      CachedModel
	length int               // the caches' length
	caches []*tensors.Tensor // keys and values of each layer, on the device
	pos    int               // the next token's position
}

// prefillExec is the program that reads a padded prompt into fresh caches of length positions.
func (s *cachedSession) prefillExec() (*context.Exec, error) {
	if e := s.g.prefill[s.length]; e != nil {
		return e, nil
	}
	length := s.length
	e, err := context.NewExec(s.g.Backend, s.g.Ctx, func(ctx *context.Context, in []*graph.Node) []*graph.Node {
		tokens := in[0]
		s.g.Settings.Apply(ctx, tokens.Graph())
		zeros := graph.Zeros(tokens.Graph(), s.m.KVCacheShape(tokens.Shape().Dim(0), length, s.g.cacheDType()))
		caches := make([]layers.KVCache, s.m.Blocks())
		for i := range caches {
			caches[i] = layers.KVCache{Keys: zeros, Values: zeros}
		}
		return s.step(ctx, tokens, in[1], in[2], caches)
	})
	if err != nil {
		return nil, err
	}
	s.g.prefill[length] = e.WithName(fmt.Sprintf("prefill_%d", length))
	return s.g.prefill[length], nil
}

// decodeExec is the program that reads one token at its position into the caches (of any length:
// one compilation per length).
func (s *cachedSession) decodeExec() (*context.Exec, error) {
	if s.g.decode != nil {
		return s.g.decode, nil
	}
	e, err := context.NewExec(s.g.Backend, s.g.Ctx, func(ctx *context.Context, in []*graph.Node) []*graph.Node {
		tokens := in[0]
		s.g.Settings.Apply(ctx, tokens.Graph())
		caches := make([]layers.KVCache, s.m.Blocks())
		for i := range caches {
			caches[i] = layers.KVCache{Keys: in[2+2*i], Values: in[3+2*i]}
		}
		return s.step(ctx, tokens, in[1], nil, caches)
	})
	if err != nil {
		return nil, err
	}
	s.g.decode = e.WithName("decode")
	return s.g.decode, nil
}

// step is both programs' graph: the logits (float32 [batch, vocab]) at each row's position last
// (nil: the step's only one), then each layer's updated keys and values.
func (s *cachedSession) step(ctx *context.Context, tokens, positions, last *graph.Node, caches []layers.KVCache) []*graph.Node {
	hidden, caches := s.m.CachedHidden(ctx, tokens, positions, caches)
	if last == nil {
		last = graph.Zeros(tokens.Graph(), shapes.Make(dtypes.Int32, tokens.Shape().Dim(0)))
	}
	out := []*graph.Node{graph.ConvertDType(s.m.Head(ctx, pick(hidden, last)), dtypes.Float32)}
	for _, c := range caches {
		out = append(out, c.Keys, c.Values)
	}
	return out
}

// prefillArgs are the prefill program's inputs for prompt: the tokens padded to a bucket, their
// positions (-1 for padding) and the last token's index.
func (s *cachedSession) prefillArgs(prompt []int32) []any {
	padded := bucket(len(prompt), leastPrompt, s.length)
	positions := make([]int32, padded)
	for i := range positions {
		positions[i] = -1
		if i < len(prompt) {
			positions[i] = int32(i)
		}
	}
	return []any{ids(prompt, padded, 0), tensors.FromFlatDataAndDimensions(positions, 1, padded),
		tensors.FromFlatDataAndDimensions([]int32{int32(len(prompt) - 1)}, 1)}
}

func (s *cachedSession) compile(promptLen, total int) error {
	prefill, err := s.prefillExec()
	if err != nil {
		return err
	}
	if err := precompile(prefill, s.prefillArgs(make([]int32, promptLen))...); err != nil {
		return err
	}
	decode, err := s.decodeExec()
	if err != nil {
		return err
	}
	args := []any{ids(nil, 1, 0), ids(nil, 1, 0)}
	shape := s.m.KVCacheShape(1, s.length, s.g.cacheDType())
	zero := tensors.FromShape(shape)
	for range 2 * s.m.Blocks() {
		args = append(args, zero)
	}
	err = precompile(decode, args...)
	zero.FinalizeAll()
	return err
}

func (s *cachedSession) prefill(prompt []int32) ([]float32, error) {
	exec, err := s.prefillExec()
	if err != nil {
		return nil, err
	}
	logits, caches, err := logitsOf(exec, s.prefillArgs(prompt)...)
	if err != nil {
		return nil, fmt.Errorf("reading the prompt (%d tokens): %w", len(prompt), err)
	}
	s.close()
	s.caches, s.pos = caches, len(prompt)
	return logits, nil
}

func (s *cachedSession) next(token int32) ([]float32, error) {
	exec, err := s.decodeExec()
	if err != nil {
		return nil, err
	}
	args := []any{ids([]int32{token}, 1, 0), ids([]int32{int32(s.pos)}, 1, 0)}
	for _, c := range s.caches {
		args = append(args, c)
	}
	logits, caches, err := logitsOf(exec, args...)
	if err != nil {
		return nil, fmt.Errorf("reading token %d at position %d: %w", token, s.pos, err)
	}
	s.close()
	s.caches = caches
	s.pos++
	return logits, nil
}

func (s *cachedSession) close() {
	for _, c := range s.caches {
		c.FinalizeAll()
	}
	s.caches = nil
}

// recomputeSession generates without a cache: every token runs the model over the whole sequence
// so far (padded to a bucket; causal attention leaves the padding after it unread) and takes the
// last position's logits, as train.Loaded's Generate did before this package.
type recomputeSession struct {
	g      *Generator
	limit  int // the model's positions
	tokens []int32
}

// exec is the program of a padded sequence and the index of its last token (one compilation per
// bucket).
func (s *recomputeSession) exec() (*context.Exec, error) {
	if s.g.recompute != nil {
		return s.g.recompute, nil
	}
	e, err := context.NewExec(s.g.Backend, s.g.Ctx, func(ctx *context.Context, tokens, last *graph.Node) *graph.Node {
		s.g.Settings.Apply(ctx, tokens.Graph())
		return graph.ConvertDType(s.g.Model.Head(ctx, pick(s.g.Model.Hidden(ctx, tokens), last)), dtypes.Float32)
	})
	if err != nil {
		return nil, err
	}
	s.g.recompute = e.WithName("recompute")
	return s.g.recompute, nil
}

// args are the program's inputs for a sequence of n tokens, s.tokens' first.
func (s *recomputeSession) args(n int) []any {
	return []any{ids(s.tokens[:min(n, len(s.tokens))], bucket(n, leastPrompt, s.limit), 0),
		tensors.FromFlatDataAndDimensions([]int32{int32(n - 1)}, 1)}
}

func (s *recomputeSession) compile(promptLen, total int) error {
	exec, err := s.exec()
	if err != nil {
		return err
	}
	for n := promptLen; ; n = bucket(n, leastPrompt, s.limit) + 1 {
		if err := precompile(exec, s.args(n)...); err != nil {
			return err
		}
		if bucket(n, leastPrompt, s.limit) >= total-1 {
			return nil
		}
	}
}

func (s *recomputeSession) run() ([]float32, error) {
	exec, err := s.exec()
	if err != nil {
		return nil, err
	}
	logits, _, err := logitsOf(exec, s.args(len(s.tokens))...)
	if err != nil {
		return nil, fmt.Errorf("reading %d tokens: %w", len(s.tokens), err)
	}
	return logits, nil
}

func (s *recomputeSession) prefill(prompt []int32) ([]float32, error) {
	s.tokens = append(s.tokens[:0], prompt...)
	return s.run()
}

func (s *recomputeSession) next(token int32) ([]float32, error) {
	s.tokens = append(s.tokens, token)
	return s.run()
}

func (s *recomputeSession) close() {}
