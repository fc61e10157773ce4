package train

import (
	"fmt"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/accum"
	ograph "github.com/onegpu/onegpu/graph"
	"github.com/onegpu/onegpu/optim/hostengine"
)

// The streamed step (Config.Offload OffloadParams; ZeRO-Infinity's and MegaTrain's layout on one
// device): the trainer's context holds the float32 master weights, the optimizer's state, the
// step counter, the loss scale and the moving-average loss in host memory, on the host engine (an
// XLA CPU client of $ONEGPU_HOST_PJRT_PLUGIN, or of $ONEGPU_PJRT_PLUGIN when that is a CPU plugin,
// else the embedded backend: hostengine.NewBackend).
// A step runs the model a stage at a time (train.Staged: the embedding, the blocks, the head):
//
//   - forward: each stage's weights go to the device, every micro-batch passes through the stage
//     (weights cross once per step and direction, not per micro-batch), the stage's inputs stay on
//     the device, the weights are freed;
//   - backward, in reverse: the head computes each micro-batch's loss and its cotangent; each
//     stage's weights go to the device again, the stage is recomputed and differentiated per
//     micro-batch, its float32 gradients summed over the micro-batches on the device and brought
//     to the host;
//   - the host engine applies the run's optimizer chain (the same optim code as a whole step:
//     loss-scale check and atomic skip, clipping, Adam, 8-bit Adam, Adafactor) to all parameters
//     at once, after the last gradients arrived: under a loss scale a non-finite gradient in any
//     block must leave every parameter unchanged, and the global-norm clipping needs every
//     gradient, so the update waits for the whole backward pass.
//
// One program per kind of stage serves every instance of it: all blocks share one forward and one
// backward program, so compile time does not grow with depth. The math is the whole step's (the
// same loss normalization, loss scale and float32 accumulation over micro-batches as
// accum.ScaledGradients); dropout draws the same masks when there is one micro-batch (block-major
// order is then the whole step's order), other masks of the same distribution otherwise.
// Checkpoints hold the same variables as a whole step's, so either resumes the other.

// streamExecutor runs a streamed step.
type streamExecutor struct {
	t     *Trainer
	model Staged
	host  backends.Backend
	// norm is the loss sums' exact normalization (lossNorm of a micro-batch's rows).
	norm float64
	// The stages and the trainer's variables of each instance, in the order of their templates.
	embed, block, head  *streamStage
	embedVars, headVars []*context.Variable
	blockVars           [][]*context.Variable
	trainable           []*context.Variable // the host update's order (the context's)
	hostExec            *context.Exec
	last                OffloadStats
	// compiled is each program's device memory by XLA's account, once known.
	compiled map[*graph.Graph]int64
}

func (s *streamExecutor) deviceStep() accum.StepFn { return s.t.deviceGradientsFn() }

func (s *streamExecutor) traffic() OffloadStats { return s.last }

// start creates the host engine, the variables (on the host) and the programs.
func (s *streamExecutor) start() error {
	t := s.t
	s.model = t.Config.Model.(Staged) // Validate checked
	host, _, err := hostengine.NewBackend()
	if err != nil {
		return fmt.Errorf("--offload params: the host engine: %w", err)
	}
	s.host = host
	s.compiled = map[*graph.Graph]int64{}
	t.Ctx = t.Ctx.Checked(false)
	k := t.Config.microBatches()
	rows := t.Config.Batch / k
	s.norm = lossNorm(rows)
	inputs := t.Config.Model.InputShapes(rows)

	var xShape shapes.Shape
	embedFn := func(ctx *context.Context, in []*graph.Node) []*graph.Node {
		t.Config.Settings().Apply(ctx, in[0].Graph())
		x := s.model.EmbedStage(ctx, in)
		xShape = x.Shape()
		return []*graph.Node{x}
	}
	if s.embedVars, err = s.stageVariables("embed", inputs, embedFn); err != nil {
		return err
	}
	n := s.model.Blocks()
	if n < 1 {
		return fmt.Errorf("--offload params: %s has %d blocks: a streamed model needs at least one", describeModel(t.Config.Model), n)
	}
	s.blockVars = make([][]*context.Variable, n)
	for i := range n {
		scope := s.model.BlockScope(i)
		used, err := s.stageVariables(scope, append([]shapes.Shape{xShape}, inputs...), func(ctx *context.Context, in []*graph.Node) []*graph.Node {
			t.Config.Settings().Apply(ctx, in[0].Graph())
			y := s.model.BlockStage(inScopePath(ctx, scope), in[0], in[1:])
			if !y.Shape().Equal(xShape) {
				panic(fmt.Errorf("block %d maps %s to %s: a block keeps its input's shape", i, xShape, y.Shape()))
			}
			return []*graph.Node{y}
		})
		if err != nil {
			return err
		}
		if i == 0 {
			s.blockVars[0] = used
		} else if s.blockVars[i], err = s.blockSources(s.blockVars[0], i, used); err != nil {
			return err
		}
	}
	headInputs := append([]shapes.Shape{xShape}, inputs...)
	if s.headVars, err = s.stageVariables("head", headInputs, func(ctx *context.Context, in []*graph.Node) []*graph.Node {
		t.Config.Settings().Apply(ctx, in[0].Graph())
		loss, _ := s.model.HeadStage(ctx, in[0], in[1:])
		return []*graph.Node{t.mustChain().ScaleLoss(ctx, graph.ConvertDType(loss.Sum, dtypes.Float32))}
	}); err != nil {
		return err
	}
	if err := t.Ctx.InitializeVariables(s.host, nil); err != nil {
		return fmt.Errorf("--offload params: initializing the weights on the host: %w", err)
	}
	used := map[*context.Variable]bool{}
	for _, vs := range append([][]*context.Variable{s.embedVars, s.headVars}, s.blockVars...) {
		for _, v := range vs {
			used[v] = true
		}
	}
	for v := range t.Ctx.IterVariables() {
		if v.Trainable && used[v] {
			s.trainable = append(s.trainable, v)
		}
	}
	if err := s.startHost(); err != nil {
		return err
	}
	s.embed, s.block, s.head = s.newStage("embed", s.embedVars), s.newStage("block", s.blockVars[0]), s.newStage("head", s.headVars)
	for kind, st := range []*streamStage{s.embed, s.block, s.head} {
		if err := s.compile(st, stageKind(kind)); err != nil {
			return err
		}
	}
	return nil
}

// startHost builds the host update on the trainer's context (creating the optimizer's state),
// initializes that state on the host engine and prepares its program.
func (s *streamExecutor) startHost() error {
	t := s.t
	inputs := []shapes.Shape{shapes.Make(dtypes.Float32), shapes.Make(dtypes.Float32), shapes.Make(dtypes.Float32)} // loss, count, denominator
	for _, v := range s.trainable {
		inputs = append(inputs, shapes.Make(ograph.WideDType(v.DType()), v.Shape().Dimensions...))
	}
	p, err := ograph.ContextProgram(s.host, t.Ctx, "host_update", inputs, s.hostFn())
	if err != nil {
		return fmt.Errorf("--offload params: the host update: %w", err)
	}
	p.Graph.Finalize()
	if err := t.Ctx.InitializeVariables(s.host, nil); err != nil {
		return fmt.Errorf("--offload params: initializing the optimizer's state on the host: %w", err)
	}
	s.hostExec, err = context.NewExec(s.host, t.Ctx, s.hostFn())
	if err != nil {
		return err
	}
	s.hostExec = s.hostExec.WithName("host_update")
	return nil
}

// hostFn is the host's update: its inputs are the batch's loss and count, the gradients'
// denominator (the count times the normalization, 0 read as 1, as accum.Gradients divides by) and
// the gradient sums of trainable; it returns the finite flag and the moving-average loss.
func (s *streamExecutor) hostFn() accum.StepFn {
	chain := s.t.mustChain()
	return func(ctx *context.Context, in []*graph.Node) []*graph.Node {
		denominator := in[2]
		grads := make([]*graph.Node, len(in)-3)
		for j, sum := range in[3:] {
			grads[j] = graph.Div(sum, graph.ConvertDType(denominator, sum.DType()))
		}
		return s.t.hostApply(ctx, chain, s.trainable, in[0], in[1], grads)
	}
}

// run runs one streamed step.
func (s *streamExecutor) run(batch []*tensors.Tensor) ([]*tensors.Tensor, *graph.Graph, error) {
	if s.host == nil {
		if err := s.start(); err != nil {
			s.close()
			return nil, nil, err
		}
	}
	sp := &streamPass{s: s, k: s.t.Config.microBatches()}
	defer sp.free()
	if err := sp.forward(batch); err != nil {
		return nil, nil, err
	}
	if err := sp.backward(); err != nil {
		return nil, nil, err
	}
	return sp.update()
}

func (s *streamExecutor) close() {
	for _, st := range []*streamStage{s.embed, s.block, s.head} {
		if st == nil {
			continue
		}
		s.unbind(st)
		for _, e := range []*context.Exec{st.fwd, st.bwd} {
			if e != nil {
				e.Finalize()
			}
		}
		if st.add != nil {
			st.add.Finalize()
		}
	}
	if s.hostExec != nil {
		s.hostExec.Finalize()
	}
	if s.host != nil {
		s.host.Finalize()
	}
	s.embed, s.block, s.head, s.hostExec, s.host = nil, nil, nil, nil, nil
	s.trainable, s.blockVars = nil, nil
}
