package optim

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/context/initializers"

	"github.com/onegpu/onegpu/exact"
)

const (
	// Adam8bitScope is the absolute scope of Adam8bit's moments and step counter.
	Adam8bitScope = "Adam8bitOptimizer"
	// DefaultBlockSize is the paper's block size: one float32 scale per 2048 elements.
	DefaultBlockSize = 2048
	// DefaultMinQuantizedSize is the paper's threshold: tensors with fewer elements (biases,
	// LayerNorm scales) keep float32 moments, which costs little and keeps them exact.
	DefaultMinQuantizedSize = 4096
	// DefaultChunkSize is the most elements of a quantized tensor updated at once: 2^22, so that
	// one chunk's float64 intermediates on the embedded backend are 32 MiB each.
	DefaultChunkSize = 1 << 22
)

// Adam8bitConfig configures Adam with block-wise 8-bit moments: the same update as GoMLX's Adam
// (same hyperparameters, learning-rate variable, global step and debiasing), with each large
// tensor's first moment stored as int8 and its second moment as uint8, one float32 scale per
// block (see quantize.go for the codes). The moments are decoded to float32, updated, used for the
// step and encoded again inside the train step, so the stored state is 2 bytes per parameter
// instead of 8. Create it with Adam8bit and finish with Done.
type Adam8bitConfig struct {
	learningRate     float64
	beta1, beta2     float64
	epsilon          float64
	blockSize        int
	minQuantizedSize int
	chunkSize        int
}

// Adam8bit returns the configuration with GoMLX Adam's defaults (betas 0.9 and 0.999, epsilon
// 1e-7, the context's learning rate), block size 2048, float32 moments for tensors under 4096
// elements, and chunks of 2^22 elements.
func Adam8bit() *Adam8bitConfig {
	return &Adam8bitConfig{learningRate: -1, beta1: 0.9, beta2: 0.999, epsilon: 1e-7,
		blockSize: DefaultBlockSize, minQuantizedSize: DefaultMinQuantizedSize, chunkSize: DefaultChunkSize}
}

// LearningRate sets the initial value of the learning-rate variable (GoMLX's
// optimizers.LearningRateVar, which schedules overwrite). Negative: the context's
// "learning_rate" parameter or 0.001.
func (c *Adam8bitConfig) LearningRate(lr float64) *Adam8bitConfig { c.learningRate = lr; return c }

// Betas sets the moving-average coefficients of the first and second moments.
func (c *Adam8bitConfig) Betas(beta1, beta2 float64) *Adam8bitConfig {
	c.beta1, c.beta2 = beta1, beta2
	return c
}

// Epsilon sets the constant added to the denominator.
func (c *Adam8bitConfig) Epsilon(eps float64) *Adam8bitConfig { c.epsilon = eps; return c }

// BlockSize sets the number of elements that share one scale.
func (c *Adam8bitConfig) BlockSize(n int) *Adam8bitConfig { c.blockSize = n; return c }

// MinQuantizedSize sets the smallest tensor (in elements) whose moments are quantized.
func (c *Adam8bitConfig) MinQuantizedSize(n int) *Adam8bitConfig { c.minQuantizedSize = n; return c }

// ChunkSize sets the most elements of a quantized tensor updated at once (rounded down to whole
// blocks, at least one): a larger tensor is updated one chunk after another, with the same values
// (see UpdateGraphWithGradients). 0 updates every tensor at once.
func (c *Adam8bitConfig) ChunkSize(n int) *Adam8bitConfig { c.chunkSize = n; return c }

// Validate returns an error naming a setting that cannot work.
func (c *Adam8bitConfig) Validate() error {
	switch {
	case !(c.beta1 >= 0 && c.beta1 < 1) || !(c.beta2 >= 0 && c.beta2 < 1):
		return fmt.Errorf("adam8bit: betas %g and %g must be in [0, 1)", c.beta1, c.beta2)
	case !(c.epsilon > 0):
		return fmt.Errorf("adam8bit: epsilon %g must be positive", c.epsilon)
	case c.blockSize < 1:
		return fmt.Errorf("adam8bit: block size %d must be at least 1", c.blockSize)
	case c.minQuantizedSize < 0:
		return fmt.Errorf("adam8bit: minimum quantized size %d cannot be negative", c.minQuantizedSize)
	case c.chunkSize < 0:
		return fmt.Errorf("adam8bit: chunk size %d cannot be negative (0 updates each tensor at once)", c.chunkSize)
	}
	return nil
}

// Done returns the optimizer. It panics (GoMLX's convention for graph-building configuration)
// with Validate's message when the configuration cannot work.
func (c *Adam8bitConfig) Done() *Adam8bitOptimizer {
	if err := c.Validate(); err != nil {
		panic(err)
	}
	cfg := *c
	return &Adam8bitOptimizer{config: cfg}
}

// Adam8bitOptimizer implements optimizers.Interface and UpdateGraphWithGradients (GoMLX's
// train.OptimizeWithGradients), so it goes wherever GoMLX's Adam goes: Apply at the end of a
// Chain (with micro-batches, a loss scale, MultiSteps), or GoMLX's Trainer.
type Adam8bitOptimizer struct {
	config Adam8bitConfig
}

// Quantized reports whether a variable of the given shape keeps 8-bit moments.
func (o *Adam8bitOptimizer) Quantized(shape shapes.Shape) bool {
	return shape.DType.IsFloat() && shape.Size() >= o.config.minQuantizedSize
}

// UpdateGraph differentiates loss with respect to the trainable variables and applies the update.
func (o *Adam8bitOptimizer) UpdateGraph(ctx *context.Context, _ *graph.Graph, loss *graph.Node) {
	o.UpdateGraphWithGradients(ctx, gradientsOf(ctx, loss, "optim.Adam8bit"), loss.DType())
}

// UpdateGraphWithGradients applies grads, one per trainable variable used in the graph in context
// order (as ctx.BuildTrainableVariablesGradientsGraph returns them). The moments are float32
// whatever lossDType is.
//
// The update is GoMLX Adam's formula computed so that every backend rounds it the same way
// (exact.ProductSum, exact.PowInt): the moments' moving averages in float64 from float32 values
// (exact products, one rounding), the debiasing powers by squaring, the step divided in float64,
// and the codes checked against exact thresholds (quantize.go). So the embedded backend and XLA
// give the same moments, codes and parameters bit for bit for the same gradients and learning
// rate, and the optimizer offload (the update on the embedded backend) trains as the device does.
// GoMLX's float32 Adam is not rounded the same on both (XLA fuses its multiply-adds): with float32
// moments this update agrees with it to a few float32 ulps, not bit for bit.
//
// A quantized tensor larger than the chunk size is updated chunk by chunk (see ChunkSize).
func (o *Adam8bitOptimizer) UpdateGraphWithGradients(ctx *context.Context, grads []*graph.Node, _ dtypes.DType) {
	c := o.config
	g, learningRate, count := startUpdate(ctx, grads, "optim.Adam8bit", Adam8bitScope, c.learningRate)
	f32, f64 := dtypes.Float32, dtypes.Float64
	one := graph.ScalarOne(g, f64)
	k := adamStep{
		learningRate: graph.ConvertDType(learningRate, f64),
		// The betas as float32 values, so that their products with float32 moments are exact.
		beta1:   graph.Scalar(g, f32, c.beta1),
		beta2:   graph.Scalar(g, f32, c.beta2),
		debias1: graph.Reciprocal(graph.Sub(one, exact.PowInt(float64(float32(c.beta1)), count))),
		debias2: graph.Reciprocal(graph.Sub(one, exact.PowInt(float64(float32(c.beta2)), count))),
		epsilon: graph.Scalar(g, f64, float64(float32(c.epsilon))),
	}
	eachTrainable(ctx, g, grads, "optim.Adam8bit", func(v *context.Variable, grad *graph.Node) {
		m := o.moment(ctx, v, "1st", false)
		s := o.moment(ctx, v, "2nd", true)
		value := v.ValueGraph(g)
		grad = graph.ConvertDType(grad, f32)
		if m.full != nil {
			mNew, sNew, updated := k.apply(m.full.ValueGraph(g), s.full.ValueGraph(g), grad, value)
			m.full.SetValueGraph(graph.ConvertDType(mNew, f32))
			s.full.SetValueGraph(graph.ConvertDType(sNew, f32))
			v.SetValueGraph(updated)
			return
		}
		v.SetValueGraph(o.updateQuantized(k, m, s, grad, value))
	})
}

// adamStep is one update's scalars: the learning rate, debiasing factors and epsilon in float64,
// the betas as float32 values.
type adamStep struct {
	learningRate, beta1, beta2, debias1, debias2, epsilon *graph.Node
}

// apply returns the new moments (float64: they stay so until stored, see exact.ProductSum) and
// the updated value (in value's dtype) for the moments m and s (float32), the gradient (float32)
// and the value, all of one shape.
func (k adamStep) apply(m, s, grad, value *graph.Node) (mNew, sNew, updated *graph.Node) {
	f32, f64 := dtypes.Float32, dtypes.Float64
	mNew = exact.ProductSum(k.beta1, m, graph.OneMinus(k.beta1), grad)
	sNew = exact.ProductSum(k.beta2, s, graph.OneMinus(k.beta2), graph.Square(grad))
	denominator := graph.Add(graph.Sqrt(graph.Mul(sNew, k.debias2)), k.epsilon)
	update := graph.Div(graph.Mul(k.learningRate, graph.Mul(mNew, k.debias1)), denominator)
	wide := graph.Sub(graph.ConvertDType(graph.ConvertDType(value, f32), f64), update)
	return mNew, sNew, graph.ConvertDType(graph.ConvertDType(wide, f32), value.DType())
}

// updateQuantized updates a variable with 8-bit moments m and s, block by block, and returns its
// new value. Blocks are independent (each has its own scales), so a tensor of more blocks than
// a chunk holds is updated one chunk of blocks after another, each chunk tied to the previous
// one's scales by an exact -0.0 (exact.NegativeZeroFrom): the embedded backend, which keeps every
// intermediate of an element-wise chain, then holds one chunk's float64 intermediates at a time
// instead of the whole tensor's (four float32 or float64 copies of a 128256×2048 embedding are
// 1-2 GiB each), and XLA cannot run the chunks side by side. The values are those of one chunk.
func (o *Adam8bitOptimizer) updateQuantized(k adamStep, m, s *moment, grad, value *graph.Node) *graph.Node {
	g := grad.Graph()
	bs := o.config.blockSize
	gradBlocks, valueBlocks := toBlocks(grad, bs), toBlocks(value, bs)
	mCodes, mScales := m.codes.ValueGraph(g), m.scales.ValueGraph(g)
	sCodes, sScales := s.codes.ValueGraph(g), s.scales.ValueGraph(g)
	numBlocks := gradBlocks.Shape().Dim(0)
	perChunk := numBlocks
	if o.config.chunkSize > 0 {
		perChunk = max(1, min(numBlocks, o.config.chunkSize/bs))
	}
	var parts [5][]*graph.Node // new first-moment codes and scales, second-moment ones, values
	var tie *graph.Node
	for start := 0; start < numBlocks; start += perChunk {
		rows := func(x *graph.Node) *graph.Node {
			if perChunk == numBlocks {
				return x
			}
			return graph.Slice(x, graph.AxisRange(start, min(numBlocks, start+perChunk)))
		}
		gradChunk := rows(gradBlocks)
		if tie != nil {
			gradChunk = graph.Add(gradChunk, graph.ConvertDType(tie, gradChunk.DType()))
		}
		mNew, sNew, updated := k.apply(dequantizeSigned(rows(mCodes), rows(mScales)),
			dequantizeUnsigned(rows(sCodes), rows(sScales)), gradChunk, rows(valueBlocks))
		mc, ms := quantizeSigned(mNew)
		sc, ss := quantizeUnsigned(sNew)
		for i, part := range []*graph.Node{mc, ms, sc, ss, updated} {
			parts[i] = append(parts[i], part)
		}
		tie = exact.NegativeZeroFrom(graph.ReduceAllMax(graph.Add(ms, ss)))
	}
	whole := func(i int) *graph.Node {
		if len(parts[i]) == 1 {
			return parts[i][0]
		}
		return graph.Concatenate(parts[i], 0)
	}
	m.codes.SetValueGraph(whole(0))
	m.scales.SetValueGraph(whole(1))
	s.codes.SetValueGraph(whole(2))
	s.scales.SetValueGraph(whole(3))
	return fromBlocks(whole(4), value.Shape().Dimensions)
}

// Clear deletes the moments and Adam8bit's step counter.
func (o *Adam8bitOptimizer) Clear(ctx *context.Context) error {
	return ctx.InAbsPath(context.ScopeSeparator + Adam8bitScope).DeleteVariablesInScope()
}

// moment is one moment of one variable: float32 as is, or 8-bit codes plus block scales.
type moment struct {
	full          *context.Variable // float32 moment, for small tensors
	codes, scales *context.Variable // quantized moment
}

// moment returns (creating them on first use) the variables that hold variable v's moment
// ("1st" or "2nd"), under /Adam8bitOptimizer/<v's scope>.
func (o *Adam8bitOptimizer) moment(ctx *context.Context, v *context.Variable, which string, unsigned bool) *moment {
	scoped := ctx.Checked(false).InAbsPath(context.ScopeSeparator + Adam8bitScope + v.Scope()).WithInitializer(initializers.Zero)
	name := fmt.Sprintf("%s_%s_moment", v.Name(), which)
	m := &moment{}
	if !o.Quantized(v.Shape()) {
		m.full = scoped.VariableWithShape(name, shapes.Make(dtypes.Float32, v.Shape().Dimensions...)).SetTrainable(false)
		return m
	}
	blockSize := o.config.blockSize
	numBlocks := (v.Shape().Size() + blockSize - 1) / blockSize
	codeType := dtypes.Int8
	if unsigned {
		codeType = dtypes.Uint8
	}
	m.codes = scoped.VariableWithShape(name+"_codes", shapes.Make(codeType, numBlocks, blockSize)).SetTrainable(false)
	m.scales = scoped.VariableWithShape(name+"_scales", shapes.Make(dtypes.Float32, numBlocks)).SetTrainable(false)
	return m
}
