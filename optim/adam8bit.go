package optim

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/context/initializers"

	ograph "github.com/onegpu/onegpu/graph"
)

const (
	// Adam8bitScope is the absolute scope of Adam8bit's moments and step counter.
	Adam8bitScope = "Adam8bitOptimizer"
	// DefaultBlockSize is the paper's block size: one float32 scale per 2048 elements.
	DefaultBlockSize = 2048
	// DefaultMinQuantizedSize is the paper's threshold: tensors with fewer elements (biases,
	// LayerNorm scales) keep float32 moments, which costs little and keeps them exact.
	DefaultMinQuantizedSize = 4096
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
}

// Adam8bit returns the configuration with GoMLX Adam's defaults (betas 0.9 and 0.999, epsilon
// 1e-7, the context's learning rate), block size 2048 and float32 moments for tensors under 4096
// elements.
func Adam8bit() *Adam8bitConfig {
	return &Adam8bitConfig{learningRate: -1, beta1: 0.9, beta2: 0.999, epsilon: 1e-7,
		blockSize: DefaultBlockSize, minQuantizedSize: DefaultMinQuantizedSize}
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
// (ograph.ProductSum, ograph.PowInt): the moments' moving averages in float64 from float32 values
// (exact products, one rounding), the debiasing powers by squaring, the step divided in float64,
// and the codes checked against exact thresholds (quantize.go). So the embedded backend and XLA
// give the same moments, codes and parameters bit for bit for the same gradients and learning
// rate, and the optimizer offload (the update on the embedded backend) trains as the device does.
// GoMLX's float32 Adam is not rounded the same on both (XLA fuses its multiply-adds): with float32
// moments this update agrees with it to a few float32 ulps, not bit for bit.
func (o *Adam8bitOptimizer) UpdateGraphWithGradients(ctx *context.Context, grads []*graph.Node, _ dtypes.DType) {
	c := o.config
	g, learningRate, count := startUpdate(ctx, grads, "optim.Adam8bit", Adam8bitScope, c.learningRate)
	f32, f64 := dtypes.Float32, dtypes.Float64
	// The betas as float32 values, so that their products with float32 moments are exact.
	beta1, beta2 := graph.Scalar(g, f32, c.beta1), graph.Scalar(g, f32, c.beta2)
	rest1, rest2 := graph.OneMinus(beta1), graph.OneMinus(beta2)
	one := graph.ScalarOne(g, f64)
	debias1 := graph.Reciprocal(graph.Sub(one, ograph.PowInt(float64(float32(c.beta1)), count)))
	debias2 := graph.Reciprocal(graph.Sub(one, ograph.PowInt(float64(float32(c.beta2)), count)))
	epsilon := graph.Scalar(g, f64, float64(float32(c.epsilon)))
	learningRate = graph.ConvertDType(learningRate, f64)

	eachTrainable(ctx, g, grads, "optim.Adam8bit", func(v *context.Variable, grad *graph.Node) {
		grad = graph.ConvertDType(grad, f32)
		m := o.moment(ctx, v, "1st", false)
		s := o.moment(ctx, v, "2nd", true)
		// float64 until stored (see ograph.ProductSum).
		mNew := ograph.ProductSum(beta1, m.read(g), rest1, grad)
		sNew := ograph.ProductSum(beta2, s.read(g), rest2, graph.Square(grad))
		m.write(mNew)
		s.write(sNew)
		denominator := graph.Add(graph.Sqrt(graph.Mul(sNew, debias2)), epsilon)
		update := graph.Div(graph.Mul(learningRate, graph.Mul(mNew, debias1)), denominator)
		value := v.ValueGraph(g)
		updated := graph.Sub(graph.ConvertDType(graph.ConvertDType(value, f32), f64), update)
		v.SetValueGraph(graph.ConvertDType(graph.ConvertDType(updated, f32), value.DType()))
	})
}

// Clear deletes the moments and Adam8bit's step counter.
func (o *Adam8bitOptimizer) Clear(ctx *context.Context) error {
	return ctx.InAbsPath(context.ScopeSeparator + Adam8bitScope).DeleteVariablesInScope()
}

// moment is one moment of one variable: float32 as is, or 8-bit codes plus block scales.
type moment struct {
	full          *context.Variable // float32 moment, for small tensors
	codes, scales *context.Variable // quantized moment
	unsigned      bool
	dims          []int
	blockSize     int
}

// moment returns (creating them on first use) the variables that hold variable v's moment
// ("1st" or "2nd"), under /Adam8bitOptimizer/<v's scope>.
func (o *Adam8bitOptimizer) moment(ctx *context.Context, v *context.Variable, which string, unsigned bool) *moment {
	scoped := ctx.Checked(false).InAbsPath(context.ScopeSeparator + Adam8bitScope + v.Scope()).WithInitializer(initializers.Zero)
	name := fmt.Sprintf("%s_%s_moment", v.Name(), which)
	m := &moment{unsigned: unsigned, dims: v.Shape().Dimensions, blockSize: o.config.blockSize}
	if !o.Quantized(v.Shape()) {
		m.full = scoped.VariableWithShape(name, shapes.Make(dtypes.Float32, m.dims...)).SetTrainable(false)
		return m
	}
	numBlocks := (v.Shape().Size() + m.blockSize - 1) / m.blockSize
	codeType := dtypes.Int8
	if unsigned {
		codeType = dtypes.Uint8
	}
	m.codes = scoped.VariableWithShape(name+"_codes", shapes.Make(codeType, numBlocks, m.blockSize)).SetTrainable(false)
	m.scales = scoped.VariableWithShape(name+"_scales", shapes.Make(dtypes.Float32, numBlocks)).SetTrainable(false)
	return m
}

// read returns the moment as a float32 tensor of the variable's shape.
func (m *moment) read(g *graph.Graph) *graph.Node {
	if m.full != nil {
		return m.full.ValueGraph(g)
	}
	codes, scales := m.codes.ValueGraph(g), m.scales.ValueGraph(g)
	if m.unsigned {
		return fromBlocks(dequantizeUnsigned(codes, scales), m.dims)
	}
	return fromBlocks(dequantizeSigned(codes, scales), m.dims)
}

// write stores value (float64 or float32, the variable's shape) in float32 or as codes.
func (m *moment) write(value *graph.Node) {
	if m.full != nil {
		m.full.SetValueGraph(graph.ConvertDType(value, dtypes.Float32))
		return
	}
	blocks := toBlocks(value, m.blockSize)
	var codes, scales *graph.Node
	if m.unsigned {
		codes, scales = quantizeUnsigned(blocks)
	} else {
		codes, scales = quantizeSigned(blocks)
	}
	m.codes.SetValueGraph(codes)
	m.scales.SetValueGraph(scales)
}
