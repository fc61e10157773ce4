package train

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/accum"
	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/exact"
	"github.com/onegpu/onegpu/layers"
)

// The programs of a streamed step (executor_stream.go). Each kind of stage (the embedding, a
// block, the head) has a template context of its own, holding the variables of the stage that
// runs now (for a block, under block 0's scope: the names its program was built with), and one
// forward and one backward program built on that template: a block's programs serve every block,
// which swaps its weights into the template before it runs.

// streamStage is one kind of stage: its template, its programs and its accumulator.
type streamStage struct {
	name string
	// tmpl holds the template variables, vars, in the order of the sources of each instance.
	tmpl *context.Context
	vars []*context.Variable
	// trainable are the indices in vars of the trainable variables, in the order the backward
	// program returns their gradients.
	trainable []int
	// fwd maps the stage's inputs to its output; bwd recomputes the stage and returns the
	// cotangent of its input (but the embedding's) and the gradients of trainable. The head has
	// one program only (bwd: the loss, the count, the metrics, then as a block).
	fwd, bwd *context.Exec
	// add sums two lists of gradients, the first donated: the accumulator over micro-batches.
	add *graph.Exec
	// rng is the index in vars of the random state, -1 when the stage draws no random numbers.
	rng int
	// ran are the graphs fwd and bwd last ran (nil before): what the device ran, for the account
	// of its memory and for comparing with the programs the planner analyzes.
	ran [2]*graph.Graph
}

// usedVariables lists the variables g uses, in the context's order.
func usedVariables(ctx *context.Context, g *graph.Graph) []*context.Variable {
	var vars []*context.Variable
	for v := range ctx.IterVariables() {
		if v.InUseByGraph(g) {
			vars = append(vars, v)
		}
	}
	return vars
}

// stageVariables builds fn on the trainer's context (creating the variables a fresh run needs,
// as a whole step would) and returns the variables it uses.
func (s *stageLayout) stageVariables(name string, inputs []shapes.Shape, fn accum.StepFn) ([]*context.Variable, error) {
	p, err := analysis.ContextProgram(s.t.Backend, s.t.Ctx, name, inputs, fn)
	if err != nil {
		return nil, fmt.Errorf("Config.Offload %s: building the %s stage: %w", s.t.Config.Offload, name, err)
	}
	defer p.Graph.Finalize()
	vars := usedVariables(s.t.Ctx, p.Graph)
	if s.narrow == nil {
		s.narrow = map[string]map[*context.Variable]bool{}
	}
	s.narrow[name] = narrowVariables(p.Graph, vars, s.t.Config.Policy.Compute)
	for _, v := range vars {
		if v.ChangedInGraph(p.Graph) && v != s.rngVar() {
			return nil, fmt.Errorf("Config.Offload %s: the %s stage changes the variable %s: a stage may change the random state only",
				s.t.Config.Offload, name, v.ScopeAndName())
		}
	}
	return vars, nil
}

// rngVar is the trainer's random state (nil until something draws random numbers).
func (s *stageLayout) rngVar() *context.Variable {
	return s.t.Ctx.GetVariableByScopeAndName(context.RootScope, context.RNGStateVariableName)
}

// blockSources returns block i's variables in the order of block 0's (its scope in place of
// block 0's), or an error naming the first that does not match.
func (s *stageLayout) blockSources(block0 []*context.Variable, i int, used []*context.Variable) ([]*context.Variable, error) {
	root := s.t.Ctx.InAbsPath(context.RootScope)
	scope0, scopeI := inScopePath(root, s.model.BlockScope(0)).Scope(), inScopePath(root, s.model.BlockScope(i)).Scope()
	out := make([]*context.Variable, len(block0))
	for j, v := range block0 {
		scope := v.Scope()
		if rest, ok := strings.CutPrefix(scope, scope0); ok && (rest == "" || strings.HasPrefix(rest, context.ScopeSeparator)) {
			scope = scopeI + rest
		}
		w := s.t.Ctx.GetVariableByScopeAndName(scope, v.Name())
		if w == nil || !w.Shape().Equal(v.Shape()) || w.Trainable != v.Trainable {
			return nil, fmt.Errorf("Config.Offload %s: block %d has no variable %s/%s like block 0's %s (%s): every block must have the same variables",
				s.t.Config.Offload, i, scope, v.Name(), v.ScopeAndName(), v.Shape())
		}
		out[j] = w
	}
	if len(used) != len(out) {
		return nil, fmt.Errorf("Config.Offload %s: block %d uses %d variables, block 0 uses %d: every block must have the same variables", s.t.Config.Offload, i, len(used), len(out))
	}
	return out, nil
}

// newStage returns the stage kind name with template variables shaped as sources.
func (s *stageLayout) newStage(name string, sources []*context.Variable) *streamStage {
	st := &streamStage{name: name, tmpl: context.New(), rng: -1}
	for _, p := range s.t.paramsToCopy() {
		st.tmpl.SetParam(p.key, p.value)
	}
	st.vars = make([]*context.Variable, len(sources))
	for j, v := range sources {
		if v == s.rngVar() {
			st.rng = j
		}
		if v.Trainable {
			st.trainable = append(st.trainable, j)
		}
	}
	return st
}

// ctxParam is a parameter of the trainer's root scope.
type ctxParam struct {
	key   string
	value any
}

// paramsToCopy are the trainer context's root parameters (the seed and what the trainer set),
// which the templates carry so that the stages see what the whole step sees.
func (t *Trainer) paramsToCopy() []ctxParam {
	var out []ctxParam
	t.Ctx.EnumerateParams(func(scope, key string, value any) {
		if scope == context.RootScope {
			out = append(out, ctxParam{key, value})
		}
	})
	return out
}

// stageGradients returns the gradients of target with respect to xs, then to the trainable
// variables g uses, in ctx's order (a template's: its sources' order), widened (float32, float64
// for float64 variables).
func stageGradients(ctx *context.Context, target *graph.Node, xs ...*graph.Node) []*graph.Node {
	g := target.Graph()
	if layers.LoRAOf(ctx).Active() {
		layers.FreezeBase(ctx) // as the whole step's loss function does: only the adapters train
	}
	vars := accum.TrainableVariables(ctx, g)
	wrt := append([]*graph.Node{}, xs...)
	for _, v := range vars {
		wrt = append(wrt, v.ValueGraph(g))
	}
	grads := graph.Gradient(target, wrt...)
	for k, v := range vars {
		grads[len(xs)+k] = graph.ConvertDType(grads[len(xs)+k], exact.WideDType(v.DType()))
	}
	return grads
}

// cotangentTarget is Σ y·dy in float32: its gradient with respect to y is dy exactly.
func cotangentTarget(y, dy *graph.Node) *graph.Node {
	return graph.ReduceAllSum(graph.ConvertDType(graph.Mul(y, dy), dtypes.Float32))
}

// stageProgram is one program of a streamed step: its kind of stage, its direction (the head's
// one program is its backward: loss and gradients), its name, its graph function and the shapes
// of its inputs at the run's micro-batch.
type stageProgram struct {
	kind     stageKind
	backward bool
	name     string
	fn       accum.StepFn
	inputs   []shapes.Shape
}

// stagePrograms lists the programs of a streamed step, for a micro-batch's inputs and a block's
// input x: the embedding's forward and backward, a block's forward and backward (one block's,
// under block 0's scope: every block runs them with its weights swapped in), the head's. It is
// the one builder of the streamed programs: the executor compiles these (compile, on template
// contexts, Reuse: the variables exist) and StreamedPrograms builds them for analysis.
func (s *stageLayout) stagePrograms(inputs []shapes.Shape, x shapes.Shape) []stageProgram {
	t, m := s.t, s.model
	scope0 := m.BlockScope(0)
	with := func(first ...shapes.Shape) []shapes.Shape { return append(first, inputs...) }
	return []stageProgram{
		{embedStage, false, "stream_embed_forward", func(ctx *context.Context, in []*graph.Node) []*graph.Node {
			t.Config.Settings().Apply(ctx, in[0].Graph())
			return []*graph.Node{m.EmbedStage(ctx, in)}
		}, inputs},
		{embedStage, true, "stream_embed_backward", func(ctx *context.Context, in []*graph.Node) []*graph.Node {
			t.Config.Settings().Apply(ctx, in[0].Graph())
			batch, dx := in[:len(in)-1], in[len(in)-1]
			return stageGradients(ctx, cotangentTarget(m.EmbedStage(ctx, batch), dx))
		}, append(slices.Clone(inputs), x)},
		{blockStage, false, "stream_block_forward", func(ctx *context.Context, in []*graph.Node) []*graph.Node {
			t.Config.Settings().without(wholeBlockKind).Apply(ctx, in[0].Graph())
			return []*graph.Node{m.BlockStage(inScopePath(ctx, scope0), in[0], in[1:])}
		}, with(x)},
		{blockStage, true, "stream_block_backward", func(ctx *context.Context, in []*graph.Node) []*graph.Node {
			t.Config.Settings().without(wholeBlockKind).Apply(ctx, in[0].Graph())
			y := m.BlockStage(inScopePath(ctx, scope0), in[0], in[2:])
			return stageGradients(ctx, cotangentTarget(y, in[1]), in[0])
		}, with(x, x)},
		{headStage, true, "stream_head", s.headFn(), with(x)},
	}
}

// wholeBlockKind is the remat kind the models (GPT, Llama) give a whole block. A streamed block's
// programs take it out of the run's remat kinds, keeping the kinds inside a block: its backward
// program recomputes the block from its kept input already, so rematerializing it there would run
// its forward twice and give XLA a larger program to compile, for the same values (remat
// recomputes the same operations) and the same peak (the recomputation holds the block's
// activations as plain differentiation does).
const wholeBlockKind = "block"

// compile creates the programs of st, a stage of the given kind, on the device backend: those of
// stagePrograms (the shapes are the arguments').
func (s *stageLayout) compile(st *streamStage, kind stageKind) error {
	backend := s.t.Backend
	var err error
	for _, p := range s.stagePrograms(nil, shapes.Shape{}) {
		if p.kind != kind || err != nil {
			continue
		}
		exec := &st.fwd
		if p.backward {
			exec = &st.bwd
		}
		*exec, err = context.NewExec(backend, st.tmpl.Reuse(), p.fn)
	}
	if err != nil {
		return fmt.Errorf("Config.Offload %s: the %s stage's programs: %w", s.t.Config.Offload, st.name, err)
	}
	st.add, err = graph.NewExec(backend, func(in []*graph.Node) []*graph.Node {
		n := len(in) / 2
		out := make([]*graph.Node, n)
		for j := range n {
			out[j] = graph.Add(in[j], in[n+j])
		}
		return out
	})
	return err
}

// headFn is the head's program: the loss sum, its count and each metric's sum and count of a
// micro-batch (float32), then the cotangent of the head's input and the gradients of its
// variables, of the loss sum times the exact normalization and the loss scale, as
// accum.ScaledGradients differentiates it.
func (s *stageLayout) headFn() accum.StepFn {
	t, m := s.t, s.model
	chain := t.mustChain()
	return func(ctx *context.Context, in []*graph.Node) []*graph.Node {
		g := in[0].Graph()
		t.Config.Settings().Apply(ctx, g)
		x, batch := in[0], in[1:]
		loss, metrics := m.HeadStage(ctx, x, batch)
		f32 := func(n *graph.Node) *graph.Node { return graph.ConvertDType(n, dtypes.Float32) }
		out := []*graph.Node{f32(loss.Sum), f32(loss.Count)}
		for _, mt := range metrics {
			out = append(out, f32(mt.Sum), f32(mt.Count))
		}
		target := chain.ScaleLoss(ctx, graph.MulScalar(f32(loss.Sum), s.norm))
		return append(out, stageGradients(ctx, target, x)...)
	}
}

// lossNorm is the power of two accum.Gradients multiplies each micro-batch's loss sum by: near
// 1/(its rows), exact.
func lossNorm(rows int) float64 { return math.Ldexp(1, -int(math.Floor(math.Log2(float64(rows))))) }

// stageKind is the kind of a stage.
type stageKind int

const (
	embedStage stageKind = iota
	blockStage
	headStage
)

// upload sends sources (the master weights of one stage instance, and the state it reads) to the
// device and returns the copies (nil for the random state, set per call) and the bytes sent. It
// touches no template: the pass runs it in the background while another stage computes.
func (s *streamExecutor) upload(sources []*context.Variable) ([]*tensors.Tensor, int64, error) {
	var sent int64
	clones := make([]*tensors.Tensor, len(sources))
	var narrow []bool
	if s.copies != nil {
		narrow = s.narrowAt(sources)
		var err error
		if sent, err = s.sendNarrow(sources, narrow, clones); err != nil {
			freeAll(clones)
			return nil, sent, err
		}
	}
	for j, src := range sources {
		if src == s.rngVar() || (narrow != nil && narrow[j]) {
			continue
		}
		value, err := src.Value()
		if err == nil {
			clones[j], err = value.OnDeviceClone(s.t.Backend, 0)
		}
		if err != nil {
			freeAll(clones)
			return nil, sent, fmt.Errorf("sending %s to the device: %w", src.ScopeAndName(), err)
		}
		sent += int64(clones[j].Memory())
	}
	return clones, sent, nil
}

// install gives st's template variables the copies upload made of sources.
func (s *streamExecutor) install(st *streamStage, sources []*context.Variable, clones []*tensors.Tensor) error {
	for j, clone := range clones {
		if clone == nil {
			continue
		}
		if err := s.setTemplate(st, j, sources[j], clone); err != nil {
			return err
		}
	}
	return nil
}

// freeAll frees the device tensors of ts.
func freeAll(ts []*tensors.Tensor) {
	for _, t := range ts {
		if t != nil {
			t.FinalizeAll()
		}
	}
}

// setTemplate gives the template's j-th variable value (creating it, with src's scope and name,
// on first use) and frees its previous value.
func (s *stageLayout) setTemplate(st *streamStage, j int, src *context.Variable, value *tensors.Tensor) error {
	if st.vars[j] == nil {
		scope := src.Scope()
		if st.name == "block" {
			scope = s.blockVars[0][j].Scope()
		}
		st.vars[j] = st.tmpl.InAbsPath(scope).VariableWithValue(src.Name(), value).SetTrainable(src.Trainable)
		return nil
	}
	return st.vars[j].SetValue(value)
}

// unbind frees the stage's weights on the device.
func (s *streamExecutor) unbind(st *streamStage) {
	for _, v := range st.vars {
		if v != nil && v.HasValue() {
			_ = v.Reset()
		}
	}
}

// accumulate returns acc + grads (acc donated), or grads when acc is nil.
func accumulate(device backends.Backend, st *streamStage, acc, grads []*tensors.Tensor) ([]*tensors.Tensor, error) {
	if acc == nil || len(grads) == 0 { // the first micro-batch, or a stage that trains nothing (a LoRA run's head)
		return grads, nil
	}
	args := make([]any, 0, 2*len(acc))
	for _, a := range acc {
		d, err := graph.DonateTensorBuffer(a, device, 0)
		if err != nil {
			return nil, err
		}
		args = append(args, d)
	}
	for _, g := range grads {
		args = append(args, g)
	}
	sums, err := st.add.Exec(args...)
	for _, g := range grads {
		g.FinalizeAll()
	}
	return sums, err
}
