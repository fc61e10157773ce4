package train

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/layers"
)

// stageLayout is a Staged model's stage instances in a trainer's context: the variables of the
// embedding, of each block and of the head, and the builder of their programs (stagePrograms,
// compile). The modes that run a step a stage at a time share it: the streamed step
// (executor_stream.go: the weights on the host) and the staged step (executor_staged.go: the
// weights on the device).
type stageLayout struct {
	t     *Trainer
	model Staged
	// norm is the loss sums' exact normalization (lossNorm of a micro-batch's rows).
	norm float64
	// The trainer's variables of each stage instance, in the order of their templates (a block's
	// in block 0's order).
	embedVars, headVars []*context.Variable
	blockVars           [][]*context.Variable
	// trainable are the trainable variables the stages use, in the context's order.
	trainable []*context.Variable
	// narrow are, by stage function (embed, block 0's scope, head), its float32 variables that it
	// reads only converted to the compute dtype (stream_narrow.go).
	narrow map[string]map[*context.Variable]bool
}

// newStageLayout returns t's layout before its variables are known (enough to build programs for
// analysis: stagePrograms); discover finds them.
func newStageLayout(t *Trainer) *stageLayout {
	rows := t.Config.Batch / t.Config.microBatches()
	return &stageLayout{t: t, model: t.Config.Model.(Staged), norm: lossNorm(rows)} // Validate checked the model
}

// discover builds each stage instance's function once on the trainer's context (creating the
// variables a fresh run needs, as a whole step would, uninitialized) and records the variables of
// each instance and the trainable ones (a LoRA run's adapters: its base frozen, as the whole
// step's loss function freezes it).
func (s *stageLayout) discover() error {
	t := s.t
	t.Ctx = t.Ctx.Checked(false)
	inputs := t.Config.Model.InputShapes(t.Config.Batch / t.Config.microBatches())
	var (
		xShape shapes.Shape
		err    error
	)
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
		return fmt.Errorf("Config.Offload %s: %s has %d blocks: a model run a stage at a time needs at least one", t.Config.Offload, describeModel(t.Config.Model), n)
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
	if lora := t.Config.LoRA.Resolved(); lora.Active() {
		// The whole step's loss function freezes the base; the stages are built without it.
		if err := checkTargets(t.Ctx, lora); err != nil {
			return err
		}
		layers.FreezeBase(t.Ctx)
	}
	used := map[*context.Variable]bool{}
	for _, vs := range append([][]*context.Variable{s.embedVars, s.headVars}, s.blockVars...) {
		for _, v := range vs {
			used[v] = true
		}
	}
	s.trainable = nil
	for v := range t.Ctx.IterVariables() {
		if v.Trainable && used[v] {
			s.trainable = append(s.trainable, v)
		}
	}
	return nil
}
