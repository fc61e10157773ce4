package hostengine

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	ograph "github.com/onegpu/onegpu/graph"
	"github.com/onegpu/onegpu/optim"
)

// Config describes an Engine: where the update runs, on which variables' context, with which
// optimizer and schedule, and in which dtype it hands the parameters back.
type Config struct {
	// Backend runs the update and holds the state (NewBackend: the XLA CPU client, or the embedded
	// backend). Not finalized by the Engine.
	Backend backends.Backend
	// Ctx is the run's root context: it holds the float32 master parameters, the optimizer's state
	// (created on the first update, on Backend), the global step and the learning rate, under the
	// same names as a run that updates on the device, so that checkpoints are the same.
	Ctx *context.Context
	// Optimizer is the run's optimizer (optim.Adam().Done(), optim.Adam8bit().Done(),
	// optim.Named("adafactor", optim.Adafactor().Done()), ...).
	Optimizer optim.GradientsOptimizer
	// Schedule sets the learning rate from the global step before each update, as the trainer does
	// (optim.ApplySchedule); nil leaves the learning-rate variable as it is.
	Schedule optim.Schedule
	// Compute is the dtype of the parameters Update and Params return (bfloat16 under a bf16
	// policy); InvalidDType means each variable's own dtype (a copy, never the master itself).
	Compute dtypes.DType
}

// Engine runs an optimizer's update for sets of variables (Stage), one set at a time, on a host
// backend. Per step, call each stage's Update once (in any order), then Commit once: the step-wide
// scalars every stage's update reads (the global step, the optimizer's update count, the scheduled
// learning rate) keep their values from before the step until Commit, so every stage computes
// exactly the update it would have computed in one program for all variables. A step whose
// gradients are not finite is skipped by calling neither Update nor Commit (the state is then
// unchanged, as optim.LossScale leaves it).
//
// Updates are serialized: Stage.Update, Stage.Params and Commit may be called from several
// goroutines, one runs at a time (one update uses the host's cores already).
type Engine struct {
	cfg Config
	mu  sync.Mutex
	// pending are the step-wide variables' values after this step, from the last Update.
	pending map[*context.Variable]*tensors.Tensor
	stages  []*Stage
}

// New checks cfg and returns its Engine.
func New(cfg Config) (*Engine, error) {
	switch {
	case cfg.Backend == nil:
		return nil, fmt.Errorf("hostengine: no backend: use hostengine.NewBackend()")
	case cfg.Ctx == nil:
		return nil, fmt.Errorf("hostengine: no context: give the run's root context, which holds the variables")
	case cfg.Optimizer == nil:
		return nil, fmt.Errorf("hostengine: no optimizer: give the run's optimizer, e.g. optim.Adam().Done()")
	case cfg.Compute != dtypes.InvalidDType && !cfg.Compute.IsFloat():
		return nil, fmt.Errorf("hostengine: compute dtype %s is not a floating-point dtype: use float32 or bfloat16", cfg.Compute)
	}
	if cfg.Schedule != nil {
		if err := optim.ValidateSchedule(cfg.Schedule); err != nil {
			return nil, err
		}
	}
	return &Engine{cfg: cfg, pending: map[*context.Variable]*tensors.Tensor{}}, nil
}

// Backend is the backend the engine updates on.
func (e *Engine) Backend() backends.Backend { return e.cfg.Backend }

// Stage is one set of variables the engine updates together (one block's), with its compiled
// update: gradients in, the variables' new values (in the compute dtype) out, the master values and
// the optimizer state updated in place in the host backend's buffers (donated to the update).
type Stage struct {
	e          *Engine
	name       string
	vars       []*context.Variable
	update     *context.Exec
	params     *context.Exec
	stepWide   []*context.Variable // the step-wide variables the update reads, in output order
	paramBytes int64
}

// Stage returns the stage of vars: trainable variables of the engine's context, each in at most one
// stage. Its update and Params list them in the context's order (Variables), the order Update takes
// their gradients in. name names the stage's programs and errors.
func (e *Engine) Stage(name string, vars []*context.Variable) (*Stage, error) {
	if len(vars) == 0 {
		return nil, fmt.Errorf("hostengine: stage %q has no variables", name)
	}
	want := map[*context.Variable]bool{}
	for _, v := range vars {
		if v == nil || !v.Trainable {
			return nil, fmt.Errorf("hostengine: stage %q: variable %v is nil or not trainable: give the parameters the optimizer updates", name, v)
		}
		want[v] = true
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.stages {
		for _, v := range s.vars {
			if want[v] {
				return nil, fmt.Errorf("hostengine: variable %s is in stages %q and %q: each variable belongs to one stage", v.ScopeAndName(), s.name, name)
			}
		}
	}
	s := &Stage{e: e, name: name}
	for v := range e.cfg.Ctx.IterVariables() {
		if want[v] {
			s.vars = append(s.vars, v)
			delete(want, v)
			s.paramBytes += int64(v.Shape().Memory())
		}
	}
	if len(want) > 0 {
		for v := range want {
			return nil, fmt.Errorf("hostengine: stage %q: variable %s is not in the engine's context", name, v.ScopeAndName())
		}
	}
	var err error
	s.update, err = context.NewExec(e.cfg.Backend, e.cfg.Ctx, ograph.AliasUpdatedState(s.updateFn))
	if err != nil {
		return nil, err
	}
	s.update = s.update.WithName("host_update_" + name)
	s.params, err = context.NewExec(e.cfg.Backend, e.cfg.Ctx, s.paramsFn)
	if err != nil {
		return nil, err
	}
	s.params = s.params.WithName("host_params_" + name)
	e.stages = append(e.stages, s)
	return s, nil
}

// Variables are the stage's variables, in the order Update takes gradients and returns parameters.
func (s *Stage) Variables() []*context.Variable { return slices.Clone(s.vars) }

// Scaling is what a step does to every stage's gradients before the optimizer sees them, the parts
// of optim's chain that need all the gradients of the step: the caller computes them over every
// stage (the finite check first: a step that is not finite calls no Update).
type Scaling struct {
	// LossScale divides the gradients (they are of the loss multiplied by it, as optim.LossScale
	// unscales them); 0 means 1.
	LossScale float32
	// Clip multiplies them: min(1, maxNorm/‖g‖) over the whole step's gradients, as
	// optim.ClipByGlobalNorm computes it; 0 means 1.
	Clip float32
}

// Update applies grads (float32, one per variable in Variables' order, on any backend or local) to
// the stage's variables with the optimizer, and returns the new parameters in the compute dtype, on
// the engine's backend. The masters and the optimizer's state stay on that backend, updated in
// place; the step-wide scalars change at Commit.
func (s *Stage) Update(grads []*tensors.Tensor, scaling Scaling) ([]*tensors.Tensor, error) {
	if len(grads) != len(s.vars) {
		return nil, fmt.Errorf("hostengine: stage %q: %d gradients for %d variables", s.name, len(grads), len(s.vars))
	}
	args := []any{orOne(scaling.LossScale), orOne(scaling.Clip)}
	for i, g := range grads {
		want := s.vars[i].Shape()
		if g == nil || !slices.Equal(g.Shape().Dimensions, want.Dimensions) || g.DType() != ograph.WideDType(want.DType) {
			return nil, fmt.Errorf("hostengine: stage %q: gradient #%d of %s is %v, want %s %v", s.name, i, s.vars[i].ScopeAndName(),
				shapeOf(g), ograph.WideDType(want.DType), want.Dimensions)
		}
		args = append(args, g)
	}
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	outs, err := s.update.Exec(args...)
	if err != nil {
		return nil, fmt.Errorf("hostengine: stage %q's update: %w", s.name, err)
	}
	params, wide := outs[:len(s.vars)], outs[len(s.vars):]
	for i, v := range s.stepWide {
		if old := s.e.pending[v]; old != nil {
			old.FinalizeAll()
		}
		s.e.pending[v] = wide[i]
	}
	return params, nil
}

// Params returns the stage's parameters in the compute dtype without updating them (for the first
// forward pass), on the engine's backend.
func (s *Stage) Params() ([]*tensors.Tensor, error) {
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	outs, err := s.params.Exec()
	if err != nil {
		return nil, fmt.Errorf("hostengine: stage %q's parameters: %w", s.name, err)
	}
	return outs, nil
}

// ParamBytes is the bytes of the stage's master parameters.
func (s *Stage) ParamBytes() int64 { return s.paramBytes }

// Commit ends the step: the step-wide scalars (global step, the optimizer's update count, the
// learning rate) take the values the step's updates computed. Without an Update since the last
// Commit it does nothing.
func (e *Engine) Commit() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for v, t := range e.pending {
		if err := v.SetValue(t); err != nil {
			return fmt.Errorf("hostengine: committing %s: %w", v.ScopeAndName(), err)
		}
	}
	clear(e.pending)
	return nil
}

// Close frees the stages' compiled programs and any uncommitted values (the variables keep theirs).
func (e *Engine) Close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.stages {
		s.update.Finalize()
		s.params.Finalize()
	}
	for _, t := range e.pending {
		t.FinalizeAll()
	}
	e.stages, e.pending = nil, map[*context.Variable]*tensors.Tensor{}
}

// updateFn is the stage's update program: inputs loss scale, clip factor and the gradients; outputs
// the parameters in the compute dtype and the step-wide variables' new values, which it does not
// write (Commit does).
func (s *Stage) updateFn(ctx *context.Context, inputs []*graph.Node) []*graph.Node {
	g := inputs[0].Graph()
	lossScale, clip, grads := inputs[0], inputs[1], inputs[2:]
	for _, v := range s.vars {
		v.ValueGraph(g) // in use first, so that the optimizer pairs them with grads in this order
	}
	if s.e.cfg.Schedule != nil {
		optim.ApplySchedule(ctx, g, s.e.cfg.Schedule)
	}
	scaled := make([]*graph.Node, len(grads))
	for i, x := range grads {
		// As optim.LossScale then optim.ClipByGlobalNorm do it: dividing and multiplying by 1 is
		// exact, so an unscaled step is the plain optimizer's bit for bit.
		x = graph.Div(x, graph.ConvertDType(lossScale, x.DType()))
		scaled[i] = graph.Mul(x, graph.ConvertDType(clip, x.DType()))
	}
	s.e.cfg.Optimizer.UpdateGraphWithGradients(ctx, scaled, dtypes.Float32)
	var outs []*graph.Node
	for _, v := range s.vars {
		outs = append(outs, s.computeCopy(v.ValueGraph(g)))
	}
	s.stepWide = s.stepWide[:0]
	for v := range ctx.IterVariables() {
		if !isStepWide(v) || !v.ChangedInGraph(g) {
			continue // a parameter or its optimizer state: updated in place
		}
		value := v.ValueGraph(g)
		v.SetValueGraph(g.GetParameterByName(v.ParameterName())) // read, not written: Commit writes it
		s.stepWide = append(s.stepWide, v)
		outs = append(outs, graph.MulScalar(value, 1)) // never an input returned as is (embedded backend)
	}
	return outs
}

// paramsFn returns the stage's parameters in the compute dtype.
func (s *Stage) paramsFn(ctx *context.Context, g *graph.Graph) []*graph.Node {
	outs := make([]*graph.Node, len(s.vars))
	for i, v := range s.vars {
		outs[i] = s.computeCopy(v.ValueGraph(g))
	}
	return outs
}

// computeCopy is x in the compute dtype, a new value even when the dtypes agree.
func (s *Stage) computeCopy(x *graph.Node) *graph.Node {
	dt := s.e.cfg.Compute
	if dt == dtypes.InvalidDType || dt == x.DType() {
		return graph.MulScalar(x, 1) // a copy: the master's buffer is donated to the next update
	}
	return graph.ConvertDType(x, dt)
}

// isStepWide reports whether v is a scalar every stage's update reads and a one-program update
// would change once per step: a global-step counter (GoMLX's, the optimizer's update count) or a
// variable under GoMLX's optimizers scope (the learning rate).
func isStepWide(v *context.Variable) bool {
	return v.Shape().IsScalar() && (v.Name() == optimizers.GlobalStepVariableName ||
		strings.HasPrefix(v.Scope(), optim.OptimizersScope))
}

func orOne(x float32) float32 {
	if x == 0 {
		return 1
	}
	return x
}

func shapeOf(t *tensors.Tensor) any {
	if t == nil {
		return "nil"
	}
	return t.Shape()
}
