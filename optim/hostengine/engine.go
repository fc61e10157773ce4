package hostengine

import (
	"fmt"
	"slices"
	"sync"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/exact"
	"github.com/onegpu/onegpu/optim"
)

// Config describes an Engine: where the update runs, on which variables' context, with which
// optimizer (alone, or at the end of the run's chain) and schedule, and what it hands back.
type Config struct {
	// Backend runs the update's programs and holds the state of a graph update (NewBackend: the
	// XLA CPU client, or the embedded backend). Not finalized by the Engine.
	Backend backends.Backend
	// Ctx is the run's root context: it holds the float32 master parameters, the optimizer's state
	// (created with the first stage), the global step and the learning rate, under the same names
	// as a run that updates on the device, so that checkpoints are the same.
	Ctx *context.Context
	// Chain is the run's chain (train.Trainer.Chain: micro-batches, a loss scale, a clip, the
	// optimizer), whose step-wide part Begin's steps run; nil: Optimizer alone.
	Chain *optim.Chain
	// Optimizer is the optimizer without a chain (optim.Adam().Done(), optim.Adam8bit().Done(),
	// optim.Named("adafactor", optim.Adafactor().Done()), ...); with a Chain, leave it nil.
	Optimizer optim.GradientsOptimizer
	// Schedule sets the learning rate from the global step before each update, as the trainer does
	// (optim.ApplySchedule); nil leaves the learning-rate variable as it is.
	Schedule optim.Schedule
	// Compute is the dtype of the parameters Update and Params return (bfloat16 under a bf16
	// policy); InvalidDType means each variable's own dtype (a copy, never the master itself).
	Compute dtypes.DType
	// NoParams makes Update return no parameters: the caller reads the masters from the variables.
	NoParams bool
	// GraphUpdate runs the optimizer's graph update on Backend even where the optimizer has a flat
	// loop (optim.FlatOptimizer: Adam, AdamW, 8-bit Adam), to compare the two.
	GraphUpdate bool
	// OnDevice says Backend is the device that computes the gradients and holds the variables
	// (train's staged step): every stage runs the optimizer's graph update there (as GraphUpdate),
	// and Step.Check computes the gradients' partial results there too, in a program, so that no
	// gradient leaves the device.
	OnDevice bool
}

// Engine runs an optimizer's update for sets of variables (Stage), one set at a time, on the host.
// A stage whose optimizer has a flat loop (optim.FlatOptimizer) and whose variables are float32
// updates in Go memory, one pass over the buffers on every core, computing what the graph update
// computes on the embedded backend bit for bit; any other runs the optimizer's graph update on
// Backend (XLA's CPU client: vectorized, several loops; the embedded backend otherwise).
//
// Per step, call each stage's Update once (in any order), then Commit once: the step-wide
// scalars every stage's update reads (the global step, the optimizer's update count, the scheduled
// learning rate) keep their values from before the step until Commit, so every stage computes
// exactly the update it would have computed in one program for all variables. A step whose
// gradients are not finite is skipped by calling neither Update nor Commit (the state is then
// unchanged, as optim.LossScale leaves it). With a Chain, Begin runs a step with the chain's
// step-wide part (the loss scale's finite check and adjustment, the global-norm clip) instead.
//
// Updates are serialized: Stage.Update, Stage.Params and Commit may be called from several
// goroutines, one runs at a time (one update uses the host's cores already).
type Engine struct {
	cfg       Config
	optimizer optim.GradientsOptimizer
	mu        sync.Mutex
	// pending are the step-wide variables' values after this step, from the last Update.
	pending map[*context.Variable]*tensors.Tensor
	stages  []*Stage
	// flat is the optimizer's flat loop (nil for none); scalars its step-wide program, held the
	// step-wide variables that program computes, and step the values it returned for this step (nil
	// until the step's first flat update).
	flat    optim.FlatUpdate
	scalars *context.Exec
	held    []*context.Variable
	step    []float64
	// begin reads the loss scale, decide runs the chain's step-wide part (Begin's steps).
	begin, decide *context.Exec
	// partials computes Step.Check's partial results on the backend (Config.OnDevice).
	partials *graph.Exec
}

// New checks cfg and returns its Engine.
func New(cfg Config) (*Engine, error) {
	opt := cfg.Optimizer
	switch {
	case cfg.Backend == nil:
		return nil, fmt.Errorf("hostengine: no backend: use hostengine.NewBackend()")
	case cfg.Ctx == nil:
		return nil, fmt.Errorf("hostengine: no context: give the run's root context, which holds the variables")
	case cfg.Chain != nil && opt != nil:
		return nil, fmt.Errorf("hostengine: both a chain and an optimizer: the chain ends with the optimizer, give one or the other")
	case cfg.Chain != nil:
		if err := cfg.Chain.Split(); err != nil {
			return nil, fmt.Errorf("hostengine: %w", err)
		}
		opt = cfg.Chain.Optimizer()
	case opt == nil:
		return nil, fmt.Errorf("hostengine: no optimizer: give the run's optimizer, e.g. optim.Adam().Done()")
	}
	if cfg.Compute != dtypes.InvalidDType && !cfg.Compute.IsFloat() {
		return nil, fmt.Errorf("hostengine: compute dtype %s is not a floating-point dtype: use float32 or bfloat16", cfg.Compute)
	}
	if cfg.Schedule != nil {
		if err := optim.ValidateSchedule(cfg.Schedule); err != nil {
			return nil, err
		}
	}
	e := &Engine{cfg: cfg, optimizer: opt, pending: map[*context.Variable]*tensors.Tensor{}}
	if f, ok := opt.(optim.FlatOptimizer); ok && !cfg.GraphUpdate && !cfg.OnDevice {
		e.flat = f.Flat(cfg.Ctx)
	}
	return e, nil
}

// Backend is the backend the engine's programs run on.
func (e *Engine) Backend() backends.Backend { return e.cfg.Backend }

// Stage is one set of variables the engine updates together (one block's): gradients in, the
// variables' new values (in the compute dtype) out, the master values and the optimizer state
// updated in place (in Go memory by a flat loop, or in the backend's buffers, donated to the
// graph update).
type Stage struct {
	e    *Engine
	name string
	vars []*context.Variable
	// flat: the stage runs the engine's flat loop; otherwise update and params are its programs.
	flat       bool
	update     *context.Exec
	params     *context.Exec
	stepWide   []*context.Variable // the step-wide variables the graph update reads, in output order
	paramBytes int64
	// like is the stage whose graph update this one runs (StageLike), swap the variables bound in
	// like's place for it: like's (the first) and this stage's, weights and optimizer state.
	like *Stage
	swap [][2]*context.Variable
	// mutable are the variables the update overwrites (masters and optimizer state), in the
	// context's order; undo their values before this step's update once saved (Save).
	mutable []*context.Variable
	undo    []any
	saved   bool
}

// Stage returns the stage of vars: trainable variables of the engine's context, each in at most one
// stage. Its update and Params list them in the context's order (Variables), the order Update takes
// their gradients in. name names the stage's programs and errors. It creates the optimizer's state
// of vars (built as the graph update builds it) and initializes it on the engine's backend.
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
	if err := s.createState(); err != nil {
		return nil, err
	}
	s.flat = e.flat != nil && s.flatFits()
	if !s.flat {
		if err := s.compile(); err != nil {
			return nil, err
		}
	}
	e.stages = append(e.stages, s)
	return s, nil
}

// createState builds the stage's graph update once, without running it, so that the optimizer
// creates its state variables, and initializes them on the engine's backend.
func (s *Stage) createState() error {
	e := s.e
	p, err := analysis.ContextProgram(e.cfg.Backend, e.cfg.Ctx, "host_state_"+s.name, s.inputShapes(), s.updateFn)
	if err != nil {
		return fmt.Errorf("hostengine: stage %q's update: %w", s.name, err)
	}
	for v := range e.cfg.Ctx.IterVariables() {
		if v.ChangedInGraph(p.Graph) { // the step-wide scalars are held, not changed (holdStepWide)
			s.mutable = append(s.mutable, v)
		}
	}
	p.Graph.Finalize()
	if err := e.cfg.Ctx.InitializeVariables(e.cfg.Backend, nil); err != nil {
		return fmt.Errorf("hostengine: initializing stage %q's optimizer state: %w", s.name, err)
	}
	return nil
}

// inputShapes are the graph update's inputs: the denominator, loss scale and clip factor, then the
// gradients.
func (s *Stage) inputShapes() []shapes.Shape {
	f32 := shapes.Make(dtypes.Float32)
	inputs := []shapes.Shape{f32, f32, f32}
	for _, v := range s.vars {
		inputs = append(inputs, shapes.Make(exact.WideDType(v.DType()), v.Shape().Dimensions...))
	}
	return inputs
}

// UpdateProgram builds, for analysis, the graph update of stage vars as the engine would compile
// it (on backend), in the engine's context: its state parameters are what host memory holds besides
// the parameters and gradients.
func (e *Engine) UpdateProgram(name string, vars []*context.Variable) (*analysis.Program, error) {
	s := &Stage{e: e, name: name, vars: vars}
	return analysis.ContextProgram(e.cfg.Backend, e.cfg.Ctx, "host_update_"+name, s.inputShapes(), s.updateFn)
}

// Variables are the stage's variables, in the order Update takes gradients and returns parameters.
func (s *Stage) Variables() []*context.Variable { return slices.Clone(s.vars) }

// Flat reports whether the stage updates with the optimizer's flat loop (else its graph update).
func (s *Stage) Flat() bool { return s.flat }

// Scaling is what a step does to every stage's gradients before the optimizer sees them: divide
// them by Denominator (a sum over micro-batches into their mean), then by LossScale (the loss was
// multiplied by it, as optim.LossScale unscales them), then multiply them by Clip (min(1,
// maxNorm/‖g‖) over the whole step's gradients, as optim.ClipByGlobalNorm computes it); 0 means 1
// for each. The caller computes them over every stage (Begin's steps do), the finite check first:
// a step that is not finite calls no Update.
type Scaling = optim.GradientScaling

// Update applies grads (float32, one per variable in Variables' order, on any backend or local) to
// the stage's variables with the optimizer, and returns the new parameters in the compute dtype
// (local for a flat stage, on the engine's backend otherwise; nil with Config.NoParams). The
// masters and the optimizer's state are updated in place; the step-wide scalars change at Commit.
func (s *Stage) Update(grads []*tensors.Tensor, scaling Scaling) ([]*tensors.Tensor, error) {
	if len(grads) != len(s.vars) {
		return nil, fmt.Errorf("hostengine: stage %q: %d gradients for %d variables", s.name, len(grads), len(s.vars))
	}
	for i, g := range grads {
		want := s.vars[i].Shape()
		if g == nil || !slices.Equal(g.Shape().Dimensions, want.Dimensions) || g.DType() != exact.WideDType(want.DType) {
			return nil, fmt.Errorf("hostengine: stage %q: gradient #%d of %s is %v, want %s %v", s.name, i, s.vars[i].ScopeAndName(),
				shapeOf(g), exact.WideDType(want.DType), want.Dimensions)
		}
	}
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	switch {
	case s.flat:
		return s.updateFlat(grads, scaling)
	case s.like != nil:
		return s.updateLike(grads, scaling)
	}
	return s.updateGraph(grads, scaling)
}

// Params returns the stage's parameters in the compute dtype without updating them (for the first
// forward pass), on the engine's backend.
func (s *Stage) Params() ([]*tensors.Tensor, error) {
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	if s.params == nil {
		var err error
		if s.params, err = context.NewExec(s.e.cfg.Backend, s.e.cfg.Ctx, s.paramsFn); err != nil {
			return nil, err
		}
		s.params = s.params.WithName("host_params_" + s.name)
	}
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
	e.endStep()
	return nil
}

// endStep forgets the step's scalars and the stages' undo records (the next step's updates start
// from other values).
func (e *Engine) endStep() {
	e.step = nil
	for _, s := range e.stages {
		s.saved = false
	}
}

// discard drops the step's uncommitted values (a skipped step).
func (e *Engine) discard() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, t := range e.pending {
		t.FinalizeAll()
	}
	clear(e.pending)
	e.endStep()
}

// Close frees the stages' compiled programs and any uncommitted values (the variables keep theirs).
func (e *Engine) Close() {
	e.discard()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.stages {
		for _, exec := range []*context.Exec{s.update, s.params} {
			if exec != nil {
				exec.Finalize()
			}
		}
	}
	for _, exec := range []*context.Exec{e.scalars, e.begin, e.decide} {
		if exec != nil {
			exec.Finalize()
		}
	}
	if e.partials != nil {
		e.partials.Finalize()
	}
	e.stages, e.scalars, e.begin, e.decide, e.partials = nil, nil, nil, nil, nil
}

// setPending records the step-wide variables' values after the step.
func (e *Engine) setPending(vars []*context.Variable, values []*tensors.Tensor) {
	for i, v := range vars {
		if old := e.pending[v]; old != nil {
			old.FinalizeAll()
		}
		e.pending[v] = values[i]
	}
}

// computeCopy is x in the compute dtype, a new value even when the dtypes agree.
func (e *Engine) computeCopy(x *graph.Node) *graph.Node {
	dt := e.cfg.Compute
	if dt == dtypes.InvalidDType || dt == x.DType() {
		return graph.MulScalar(x, 1) // a copy: the master's buffer is donated to the next update
	}
	return graph.ConvertDType(x, dt)
}

func shapeOf(t *tensors.Tensor) any {
	if t == nil {
		return "nil"
	}
	return t.Shape()
}
