package layers

import (
	"fmt"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// Projection is the output layer whose logits ChunkedCrossEntropySum never materializes whole:
// logits = x·Weight (+ Bias).
type Projection struct {
	// Weight is [vocab, width] when ClassesFirst (a Hugging Face Linear's weight, or an embedding
	// table when the embeddings are tied), [width, vocab] otherwise (a Dense kernel).
	Weight *graph.Node
	// Bias is [vocab], or nil for none.
	Bias         *graph.Node
	ClassesFirst bool
	// Frozen says the weight and bias take no gradient (a LoRA run's head): the chunked loss's
	// backward pass computes the gradient of x only, skipping the [vocab, width] products and
	// their sum.
	Frozen bool
	// ClassChunk is the most classes one product takes: a chunk's logits are computed, reduced
	// and differentiated a piece of the vocabulary at a time (pieces of equal size, at most
	// ClassChunk), so that no product reads the whole weight. 0 picks DefaultClassChunk for a
	// Frozen weight and the whole vocabulary otherwise: a trained weight's gradient would be
	// assembled from its pieces, a copy as large as itself. A negative value panics.
	ClassChunk int
}

// DefaultClassChunk is the piece of the vocabulary a frozen output layer's products take at a
// time (Projection.ClassChunk 0). The embedded backend's matmul copies both operands into blocks
// of 32×32: a product of a chunk of tokens with Llama 3's whole [128256, 4096] head copies the
// head, 1 GiB in bfloat16, with a [rows, 128256] float32 accumulator, for every chunk, forward and
// backward, which is the peak of an 8B LoRA step. Pieces of at most 16,384 classes (8 of 16,032
// there) copy an eighth of the head at a time (its slice and the slice's blocked copy) and never
// hold a chunk's logits whole. Vocabularies of at most 16,384 classes are not split.
const DefaultClassChunk = 16384

// ChunkedCrossEntropySum is mixed.SoftmaxCrossEntropySum(x·W + b, labels, weights) computed chunk
// tokens at a time: the summed cross-entropy of predicting labels from the hidden states x and the
// sum of the weights, as float32 scalars (float64 for float64 x), so that means over masked tokens
// and micro-batches stay exact (mean = Σsum / Σcount).
//
// x is [..., width] in the compute dtype; the product runs in x's dtype (Weight and Bias are cast
// to it, as Dense does) and the loss in float32. labels are integers with x's shape minus its last
// axis; weights has the labels' shape and may be nil (every token counts 1), a boolean mask or
// floating-point weights; tokens of weight 0 add exactly 0 to both sums and get zero gradients.
//
// No [tokens, vocab] array of more than chunk rows exists, forward or backward (nor of more than
// Projection.ClassChunk columns when the vocabulary is split into pieces: a token's log-sum-exp is
// then combined from its pieces' ones): the forward pass keeps one log-sum-exp per token, and the backward pass recomputes each chunk's logits and
// accumulates the gradients of Weight and Bias in float32 (returned in their own dtypes; when
// Weight is also the embedding table, autodiff adds the lookup's gradient to it). The chunks are
// unrolled and chained by exact-zero ties, so that XLA runs them one after the other and does not
// merge the recomputation back into the forward pass. chunk must be at least 1; the token count
// need not be a multiple of it.
func ChunkedCrossEntropySum(x *graph.Node, proj Projection, labels, weights *graph.Node, chunk int) (sum, count *graph.Node) {
	l := newChunkedLoss(x, proj, labels, weights, chunk)
	return l.sum(x, proj), l.count
}

// ChunkedCrossEntropyAccuracy is ChunkedCrossEntropySum that also returns correct: the summed
// weight of the tokens whose largest logit is their label (each counts 1 without weights; ties
// go to the first largest logit, as graph.ArgMax's), computed from each chunk's float32 logits in
// the forward pass, without a gradient. It is a classifier's accuracy (correct / count) for a loss
// whose logits never exist whole.
func ChunkedCrossEntropyAccuracy(x *graph.Node, proj Projection, labels, weights *graph.Node, chunk int) (sum, count, correct *graph.Node) {
	l := newChunkedLoss(x, proj, labels, weights, chunk)
	l.countCorrect = true
	return l.sum(x, proj), l.count, graph.StopGradient(l.correct)
}

// sum is the differentiable summed loss of x under proj.
func (l *chunkedLoss) sum(x *graph.Node, proj Projection) *graph.Node {
	inputs := []*graph.Node{x, proj.Weight}
	if proj.Bias != nil {
		inputs = append(inputs, proj.Bias)
	}
	if proj.Frozen {
		inputs, l.frozen = inputs[:1], true
	}
	return withGradients("loss", inputs, l.forward(), l.backward)
}

// chunkedLoss holds one call's flattened inputs, chunks and the forward values the backward pass
// reads.
type chunkedLoss struct {
	x, weight, bias *graph.Node // x [tokens, width]; weight and bias cast to x's dtype, gradients stopped
	// whole is the weight as given (gradient stopped): with several pieces, each piece is sliced
	// from it and cast where it is multiplied, and weight is nil.
	whole *graph.Node
	// pieces are the classes each product takes (one span of the whole vocabulary when unsplit).
	pieces       []span
	labels       *graph.Node // [tokens, 1] int32
	kept, scale  *graph.Node // [tokens] bool and weight (wide), or nil without weights
	count        *graph.Node
	classesFirst bool
	vocab        int
	wide         dtypes.DType
	xShape       shapes.Shape
	weightDType  dtypes.DType
	chunks       []span
	logSumExp    []*graph.Node // per chunk [rows, 1]
	// countCorrect asks forward to sum into correct the weights of the tokens predicted right.
	countCorrect bool
	correct      *graph.Node
	// frozen: the backward pass gives x's gradient only.
	frozen bool
}

func newChunkedLoss(x *graph.Node, proj Projection, labels, weights *graph.Node, chunk int) *chunkedLoss {
	const fn = "layers.ChunkedCrossEntropySum"
	if x.Rank() < 2 || !x.DType().IsFloat() {
		panic(fmt.Sprintf("%s: x must be floating-point hidden states [..., width], got %s", fn, x.Shape()))
	}
	w := proj.Weight
	width := x.Shape().Dim(-1)
	if w == nil || w.Rank() != 2 || !w.DType().IsFloat() {
		panic(fmt.Sprintf("%s: the projection's weight must be a floating-point matrix, got %v", fn, w))
	}
	classAxis, widthAxis := 1, 0
	if proj.ClassesFirst {
		classAxis, widthAxis = 0, 1
	}
	if w.Shape().Dim(widthAxis) != width {
		panic(fmt.Sprintf("%s: weight %s (ClassesFirst=%t) does not take x's width %d on axis %d", fn, w.Shape(), proj.ClassesFirst, width, widthAxis))
	}
	vocab := w.Shape().Dim(classAxis)
	if proj.Bias != nil && (proj.Bias.Rank() != 1 || proj.Bias.Shape().Dim(0) != vocab || !proj.Bias.DType().IsFloat()) {
		panic(fmt.Sprintf("%s: the bias must be a floating-point vector [%d], got %s", fn, vocab, proj.Bias.Shape()))
	}
	lead := x.Shape().Dimensions[:x.Rank()-1]
	if labels.Rank() == x.Rank() && labels.Shape().Dim(-1) == 1 {
		labels = graph.Squeeze(labels, -1)
	}
	if !labels.DType().IsInt() || !slices.Equal(labels.Shape().Dimensions, lead) {
		panic(fmt.Sprintf("%s: labels must be integers of x's shape %s minus its last axis, got %s", fn, x.Shape(), labels.Shape()))
	}
	if chunk < 1 {
		panic(fmt.Sprintf("%s: the chunk must be at least 1 token, got %d", fn, chunk))
	}
	if proj.ClassChunk < 0 {
		panic(fmt.Sprintf("%s: Projection.ClassChunk must be 0 (automatic) or a number of classes, got %d", fn, proj.ClassChunk))
	}
	tokens := labels.Shape().Size()
	g := x.Graph()
	bias := proj.Bias
	if !proj.Frozen {
		// A frozen weight takes no gradient: it needs no stop, and gets no copy (the embedded
		// backend copies a variable an Identity passes on: a [vocab, width] head at the loss's peak).
		w = graph.StopGradient(w)
		if bias != nil {
			bias = graph.StopGradient(bias)
		}
	}
	l := &chunkedLoss{
		x:            graph.Reshape(graph.StopGradient(x), tokens, width),
		whole:        w,
		labels:       graph.Reshape(graph.ConvertDType(labels, dtypes.Int32), tokens, 1),
		classesFirst: proj.ClassesFirst, vocab: vocab, wide: statsDType(x.DType()),
		xShape: x.Shape(), weightDType: w.DType(), chunks: spans(tokens, chunk),
		pieces: classPieces(vocab, proj),
	}
	if len(l.pieces) == 1 {
		l.weight = graph.ConvertDType(w, x.DType()) // once: every product takes it whole
	}
	if proj.Bias != nil {
		l.bias = graph.Reshape(graph.ConvertDType(bias, x.DType()), 1, vocab)
	}
	if weights == nil {
		l.count = graph.Scalar(g, l.wide, float64(tokens))
		return l
	}
	if weights.Rank() == x.Rank() && weights.Shape().Dim(-1) == 1 {
		weights = graph.Squeeze(weights, -1)
	}
	if !slices.Equal(weights.Shape().Dimensions, lead) || (weights.DType() != dtypes.Bool && !weights.DType().IsFloat()) {
		panic(fmt.Sprintf("%s: weights must be booleans or floats of the labels' shape %v, got %s", fn, lead, weights.Shape()))
	}
	scale := graph.Reshape(graph.ConvertDType(graph.StopGradient(weights), l.wide), tokens)
	l.kept = graph.NotEqual(scale, graph.ScalarZero(g, l.wide))
	l.scale = scale
	l.count = graph.ReduceAllSum(scale)
	return l
}

// classPieces cuts [0, vocab) into the pieces each product takes (Projection.ClassChunk): equal
// pieces of at most the chunk, one span when the vocabulary is not split.
func classPieces(vocab int, proj Projection) []span {
	size := proj.ClassChunk
	if size == 0 {
		if !proj.Frozen {
			return []span{{0, vocab}}
		}
		size = DefaultClassChunk
	}
	n := (vocab + size - 1) / size
	return spans(vocab, (vocab+n-1)/n)
}

// classAxis is the weight's axis of classes.
func (l *chunkedLoss) classAxis() int {
	if l.classesFirst {
		return 0
	}
	return 1
}

// rows returns chunk c's rows of x [rows, width], tied to deps.
func (l *chunkedLoss) rows(c int, deps ...*graph.Node) *graph.Node {
	return after(sliceAxis(l.x, 0, l.chunks[c]), deps...)
}

// logits returns the logits [rows, piece] of xc for piece p's classes in the wide dtype, computed
// in x's dtype, and the weight's piece in x's dtype (the backward product takes it too). A piece
// of a split vocabulary is sliced from the weight after deps exist, so that neither backend
// computes (XLA: hoists, or merges with another chunk's) a piece before its product needs it.
func (l *chunkedLoss) logits(xc *graph.Node, p int, deps ...*graph.Node) (logits, weight *graph.Node) {
	weight = l.weight
	if weight == nil {
		weight = graph.ConvertDType(after(sliceAxis(l.whole, l.classAxis(), l.pieces[p]), deps...), l.x.DType())
	}
	logits = graph.DotGeneral(xc, []int{1}, nil, weight, []int{1 - l.classAxis()}, nil)
	if l.bias != nil {
		logits = graph.Add(logits, sliceAxis(l.bias, 1, l.pieces[p]))
	}
	return graph.ConvertDType(logits, l.wide), weight
}

// isLabel is true at each of chunk c's rows' label among piece p's classes: [rows, piece].
func (l *chunkedLoss) isLabel(c, p int) *graph.Node {
	rows, piece := l.chunks[c].len(), l.pieces[p]
	g := l.x.Graph()
	classes := graph.Iota(g, shapes.Make(dtypes.Int32, rows, piece.len()), 1)
	labels := sliceAxis(l.labels, 0, l.chunks[c])
	if piece.start != 0 {
		labels = graph.Sub(labels, graph.Scalar(g, dtypes.Int32, piece.start))
	}
	return graph.Equal(classes, graph.BroadcastToDims(labels, rows, piece.len()))
}

// logSumExp returns the log-sum-exp of x [rows, n] along its last axis, [rows, 1].
func logSumExp(x *graph.Node) *graph.Node {
	maxX := graph.ReduceAndKeep(x, graph.ReduceMax, -1)
	return graph.Add(graph.Log(graph.ReduceAndKeep(graph.Exp(graph.Sub(x, maxX)), graph.ReduceSum, -1)), maxX)
}

// forward returns the weighted sum of the tokens' cross-entropies and records each chunk's
// log-sum-exp.
func (l *chunkedLoss) forward() *graph.Node {
	var sum *graph.Node
	for c, ch := range l.chunks {
		xc := l.rows(c, sum)
		var lses []*graph.Node
		var picked, best, argBest *graph.Node
		var dep *graph.Node // the previous piece's log-sum-exp: the pieces run one after the other
		for p, piece := range l.pieces {
			logits, _ := l.logits(xc, p, sum, dep)
			dep = logSumExp(logits)
			lses = append(lses, dep)
			picked = addOrSet(picked, graph.ReduceAndKeep(graph.Where(l.isLabel(c, p), logits, graph.ZerosLike(logits)), graph.ReduceSum, -1))
			if !l.countCorrect {
				continue
			}
			arg := graph.ArgMax(logits, -1, dtypes.Int32)
			if len(l.pieces) == 1 {
				argBest = arg
				continue
			}
			// the first largest logit: a later piece wins only with a larger one
			top := graph.ReduceMax(logits, -1)
			if p == 0 {
				best, argBest = top, arg
				continue
			}
			arg = graph.Add(arg, graph.Scalar(xc.Graph(), dtypes.Int32, piece.start))
			larger := graph.GreaterThan(top, best)
			best, argBest = graph.Where(larger, top, best), graph.Where(larger, arg, argBest)
		}
		lse := lses[0]
		if len(lses) > 1 {
			lse = logSumExp(graph.Concatenate(lses, -1))
		}
		l.logSumExp = append(l.logSumExp, lse)
		losses := graph.Reshape(graph.Sub(lse, picked), ch.len())
		if l.scale != nil {
			// Where, not a product: a token of weight 0 adds 0 even when its loss is not finite.
			losses = graph.Where(sliceAxis(l.kept, 0, ch), graph.Mul(sliceAxis(l.scale, 0, ch), losses), graph.ZerosLike(losses))
		}
		sum = addOrSet(sum, graph.ReduceSum(losses, 0))
		if l.countCorrect {
			l.correct = addOrSet(l.correct, l.correctIn(c, argBest))
		}
	}
	return sum
}

// correctIn returns the summed weight of chunk c's tokens whose largest logit is their label;
// argMax [rows] holds each token's.
func (l *chunkedLoss) correctIn(c int, argMax *graph.Node) *graph.Node {
	ch := l.chunks[c]
	hits := graph.Equal(argMax, graph.Reshape(sliceAxis(l.labels, 0, ch), ch.len()))
	if l.scale == nil {
		return graph.ReduceSum(graph.ConvertDType(hits, l.wide), 0)
	}
	kept := graph.LogicalAnd(hits, sliceAxis(l.kept, 0, ch))
	return graph.ReduceSum(graph.Where(kept, sliceAxis(l.scale, 0, ch), graph.ZerosLike(sliceAxis(l.scale, 0, ch))), 0)
}

// backward returns the gradients of x, the weight and the bias for the cotangent dSum of the sum:
// d logits = (softmax - onehot)·weight·dSum, recomputed chunk by chunk and piece by piece. A
// split vocabulary's pieces add their products to x's gradient in the wide dtype; the weight's and
// the bias's gradients are accumulated per piece and joined at the end.
func (l *chunkedLoss) backward(_, dSum *graph.Node) []*graph.Node {
	dSum = graph.ConvertDType(dSum, l.wide)
	dx := make([]*graph.Node, len(l.chunks))
	dW := make([]*graph.Node, len(l.pieces))
	dB := make([]*graph.Node, len(l.pieces))
	split := len(l.pieces) > 1
	chain := []*graph.Node{dSum} // the recomputation starts once the cotangent exists
	for c, ch := range l.chunks {
		xc := l.rows(c, chain...)
		coef := graph.BroadcastToDims(dSum, ch.len(), 1)
		var kept *graph.Node
		if l.scale != nil {
			rows := graph.Reshape(sliceAxis(l.scale, 0, ch), ch.len(), 1)
			kept = graph.Reshape(sliceAxis(l.kept, 0, ch), ch.len(), 1)
			coef = graph.Where(kept, graph.Mul(rows, coef), graph.ZerosLike(coef))
		}
		var dxc *graph.Node
		for p, piece := range l.pieces {
			logits, weight := l.logits(xc, p, chain...)
			probs := graph.Exp(graph.Sub(logits, l.logSumExp[c]))
			dLogits := graph.Sub(probs, graph.ConvertDType(l.isLabel(c, p), l.wide))
			if kept != nil {
				dLogits = graph.Where(graph.BroadcastToDims(kept, ch.len(), piece.len()), graph.Mul(dLogits, coef), graph.ZerosLike(dLogits))
			} else {
				dLogits = graph.Mul(dLogits, coef)
			}
			if l.bias != nil && !l.frozen {
				dB[p] = addOrSet(dB[p], graph.ReduceSum(dLogits, 0))
			}
			dl := graph.ConvertDType(dLogits, l.x.DType())                                // the product's dtype, as Dense's gradient
			dxp := graph.DotGeneral(dl, []int{1}, nil, weight, []int{l.classAxis()}, nil) // [rows, width]
			if split {
				dxp = graph.ConvertDType(dxp, l.wide)
			}
			dxc = addOrSet(dxc, dxp)
			chain = []*graph.Node{dxc}
			if l.frozen {
				continue
			}
			var dWp *graph.Node
			if l.classesFirst {
				dWp = graph.DotGeneral(dl, []int{0}, nil, xc, []int{0}, nil) // [piece, width]
			} else {
				dWp = graph.DotGeneral(xc, []int{0}, nil, dl, []int{0}, nil) // [width, piece]
			}
			dW[p] = addOrSet(dW[p], graph.ConvertDType(dWp, l.wide))
			chain = append(chain, dW[p])
		}
		dx[c] = graph.ConvertDType(dxc, l.x.DType())
	}
	gradX := graph.Reshape(concatenate(dx, 0), l.xShape.Dimensions...)
	if l.frozen {
		return []*graph.Node{gradX}
	}
	grads := []*graph.Node{gradX, concatenate(dW, l.classAxis())}
	if l.bias != nil {
		grads = append(grads, concatenate(dB, 0))
	}
	return grads
}
