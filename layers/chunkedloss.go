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
}

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
// No [tokens, vocab] array of more than chunk rows exists, forward or backward: the forward pass
// keeps one log-sum-exp per token, and the backward pass recomputes each chunk's logits and
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
	labels          *graph.Node // [tokens, 1] int32
	kept, scale     *graph.Node // [tokens] bool and weight (wide), or nil without weights
	count           *graph.Node
	classesFirst    bool
	vocab           int
	wide            dtypes.DType
	xShape          shapes.Shape
	weightDType     dtypes.DType
	chunks          []span
	logSumExp       []*graph.Node // per chunk [rows, 1]
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
		weight:       graph.ConvertDType(w, x.DType()),
		labels:       graph.Reshape(graph.ConvertDType(labels, dtypes.Int32), tokens, 1),
		classesFirst: proj.ClassesFirst, vocab: vocab, wide: statsDType(x.DType()),
		xShape: x.Shape(), weightDType: w.DType(), chunks: spans(tokens, chunk),
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

// logits returns chunk c's logits [rows, vocab] in the wide dtype, computed in x's dtype from its
// rows tied to deps.
func (l *chunkedLoss) logits(c int, deps ...*graph.Node) (xc, logits *graph.Node) {
	xc = after(sliceAxis(l.x, 0, l.chunks[c]), deps...)
	contract := 1
	if l.classesFirst {
		contract = 0
	}
	logits = graph.DotGeneral(xc, []int{1}, nil, l.weight, []int{1 - contract}, nil)
	if l.bias != nil {
		logits = graph.Add(logits, l.bias)
	}
	return xc, graph.ConvertDType(logits, l.wide)
}

// isLabel is true at each row's label: [rows, vocab].
func (l *chunkedLoss) isLabel(c int) *graph.Node {
	rows := l.chunks[c].len()
	classes := graph.Iota(l.x.Graph(), shapes.Make(dtypes.Int32, rows, l.vocab), 1)
	return graph.Equal(classes, graph.BroadcastToDims(sliceAxis(l.labels, 0, l.chunks[c]), rows, l.vocab))
}

// forward returns the weighted sum of the tokens' cross-entropies and records each chunk's
// log-sum-exp.
func (l *chunkedLoss) forward() *graph.Node {
	var sum *graph.Node
	for c, ch := range l.chunks {
		_, logits := l.logits(c, sum)
		maxLogit := graph.ReduceAndKeep(logits, graph.ReduceMax, -1)
		lse := graph.Add(graph.Log(graph.ReduceAndKeep(graph.Exp(graph.Sub(logits, maxLogit)), graph.ReduceSum, -1)), maxLogit)
		l.logSumExp = append(l.logSumExp, lse)
		picked := graph.ReduceAndKeep(graph.Where(l.isLabel(c), logits, graph.ZerosLike(logits)), graph.ReduceSum, -1)
		losses := graph.Reshape(graph.Sub(lse, picked), ch.len())
		if l.scale != nil {
			// Where, not a product: a token of weight 0 adds 0 even when its loss is not finite.
			losses = graph.Where(sliceAxis(l.kept, 0, ch), graph.Mul(sliceAxis(l.scale, 0, ch), losses), graph.ZerosLike(losses))
		}
		sum = addOrSet(sum, graph.ReduceSum(losses, 0))
		if l.countCorrect {
			l.correct = addOrSet(l.correct, l.correctIn(c, logits))
		}
	}
	return sum
}

// correctIn returns the summed weight of chunk c's tokens whose largest logit is their label.
func (l *chunkedLoss) correctIn(c int, logits *graph.Node) *graph.Node {
	ch := l.chunks[c]
	hits := graph.Equal(graph.ArgMax(logits, -1, dtypes.Int32), graph.Reshape(sliceAxis(l.labels, 0, ch), ch.len()))
	if l.scale == nil {
		return graph.ReduceSum(graph.ConvertDType(hits, l.wide), 0)
	}
	kept := graph.LogicalAnd(hits, sliceAxis(l.kept, 0, ch))
	return graph.ReduceSum(graph.Where(kept, sliceAxis(l.scale, 0, ch), graph.ZerosLike(sliceAxis(l.scale, 0, ch))), 0)
}

// backward returns the gradients of x, the weight and the bias for the cotangent dSum of the sum:
// d logits = (softmax - onehot)·weight·dSum, recomputed chunk by chunk.
func (l *chunkedLoss) backward(_, dSum *graph.Node) []*graph.Node {
	dSum = graph.ConvertDType(dSum, l.wide)
	dx := make([]*graph.Node, len(l.chunks))
	var dW, dB *graph.Node
	chain := []*graph.Node{dSum} // the recomputation starts once the cotangent exists
	for c, ch := range l.chunks {
		xc, logits := l.logits(c, chain...)
		probs := graph.Exp(graph.Sub(logits, l.logSumExp[c]))
		dLogits := graph.Sub(probs, graph.ConvertDType(l.isLabel(c), l.wide))
		coef := graph.BroadcastToDims(dSum, ch.len(), 1)
		if l.scale != nil {
			rows := graph.Reshape(sliceAxis(l.scale, 0, ch), ch.len(), 1)
			coef = graph.Where(graph.Reshape(sliceAxis(l.kept, 0, ch), ch.len(), 1), graph.Mul(rows, coef), graph.ZerosLike(coef))
			dLogits = graph.Where(graph.BroadcastToDims(graph.Reshape(sliceAxis(l.kept, 0, ch), ch.len(), 1), ch.len(), l.vocab),
				graph.Mul(dLogits, coef), graph.ZerosLike(dLogits))
		} else {
			dLogits = graph.Mul(dLogits, coef)
		}
		if l.bias != nil && !l.frozen {
			dB = addOrSet(dB, graph.ReduceSum(dLogits, 0))
		}
		dl := graph.ConvertDType(dLogits, l.x.DType()) // the product's dtype, as Dense's gradient
		classAxis := 1
		if l.classesFirst {
			classAxis = 0
		}
		dx[c] = graph.DotGeneral(dl, []int{1}, nil, l.weight, []int{classAxis}, nil) // [rows, width]
		if l.frozen {
			chain = []*graph.Node{dx[c]}
			continue
		}
		var dWc *graph.Node
		if l.classesFirst {
			dWc = graph.DotGeneral(dl, []int{0}, nil, xc, []int{0}, nil) // [vocab, width]
		} else {
			dWc = graph.DotGeneral(xc, []int{0}, nil, dl, []int{0}, nil) // [width, vocab]
		}
		dW = addOrSet(dW, graph.ConvertDType(dWc, l.wide))
		chain = []*graph.Node{dx[c], dW}
	}
	if l.frozen {
		return []*graph.Node{graph.Reshape(concatenate(dx, 0), l.xShape.Dimensions...)}
	}
	grads := []*graph.Node{graph.Reshape(concatenate(dx, 0), l.xShape.Dimensions...), dW}
	if l.bias != nil {
		grads = append(grads, dB)
	}
	return grads
}
