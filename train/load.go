package train

import (
	"fmt"
	"sort"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/internal/panics"
	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/platform"
	"github.com/onegpu/onegpu/train/checkpoint"
)

// Loaded is a model restored from a checkpoint for evaluation and inference, everything it needs
// read from the checkpoint's manifest: the model and its sizes (RegisterModel), the precision
// policy and the step. No train.Config, optimizer or data is needed.
//
//	m, err := train.Load("runs/a")          // the folder's newest whole checkpoint
//	defer m.Close()
//	loss, metrics, err := m.Loss(batch)      // mean loss on a batch, dropout off
//
// Package infer generates text from it: infer.New(m.Backend, m.Model, m.Ctx, m.Settings()).
type Loaded struct {
	// Model is the checkpoint's model, rebuilt from its manifest.
	Model Model
	// Policy is the precision policy the model was trained with; Loss computes under it.
	Policy mixed.Policy
	// Attention and CrossEntropy are how attention and the loss compute: the run's, from the
	// manifest (plain when it does not say). Change them before the first Loss to
	// evaluate otherwise (chunked attention for sequences whose scores do not fit).
	Attention    layers.Attention
	CrossEntropy layers.CrossEntropy
	// Step is the checkpoint's step: the steps taken, skipped ones included.
	Step int
	// Dir is the checkpoint folder, Checkpoint the base name of the checkpoint loaded (the newest
	// whole one) and Written what its manifest records of the run that wrote it.
	Dir, Checkpoint string
	Written         checkpoint.WrittenBy
	// Backend computes Loss; Ctx holds the restored variables (the optimizer's state
	// is not read).
	Backend backends.Backend
	Ctx     *context.Context

	ownBackend bool
	loss       *context.Exec
}

// Load opens the checkpoint folder dir with its path alone, reads the model, its sizes and the
// policy from the newest whole checkpoint's manifest and restores its weights, on the default
// backend (platform.NewBackend(""): $GOMLX_BACKEND, else $ONEGPU_PJRT_PLUGIN, else the embedded
// one), which Close releases. The folder is neither locked nor changed: a run may be writing it.
// It returns an error naming the folder when it holds no whole checkpoint, its model's type is
// not registered (RegisterModel), or its weights do not fit the model the manifest describes.
func Load(dir string) (*Loaded, error) {
	backend, err := platform.NewBackend("")
	if err != nil {
		return nil, err
	}
	l, err := LoadOn(backend, dir)
	if err != nil {
		backend.Finalize()
		return nil, err
	}
	l.ownBackend = true
	return l, nil
}

// LoadOn is Load on backend, which Close leaves to the caller.
func LoadOn(backend backends.Backend, dir string) (*Loaded, error) {
	folder, err := checkpoint.OpenReadOnly(dir)
	if err != nil {
		return nil, err
	}
	written := folder.Written()
	fail := func(err error) (*Loaded, error) {
		return nil, fmt.Errorf("checkpoint %s in %s: %w", folder.ResumeFrom, dir, err)
	}
	if written.BaseSHA256 != "" {
		return fail(fmt.Errorf("it holds adapters (%s) trained on a frozen base it does not store (sha256 %s, from %s): "+
			"evaluate them on their base: hf.ExportAdapter writes them as a PEFT adapter, hf.LoadAdapter reads one onto the base's weights", written.Adapters, written.BaseSHA256, written.BaseFrom))
	}
	model, err := modelFromRecord(written)
	if err != nil {
		return fail(err)
	}
	policy, err := mixed.ParsePolicy(written.Policy)
	if err != nil {
		return fail(fmt.Errorf("its manifest's policy: %w", err))
	}
	if err := policy.Validate(backend); err != nil {
		return fail(err)
	}
	l := &Loaded{Model: model, Policy: policy, Step: folder.ResumeStep, Dir: dir, Checkpoint: folder.ResumeFrom, Written: written,
		Backend: backend}
	if written.Attention != "" {
		if l.Attention, err = layers.ParseAttention(written.Attention); err != nil {
			return fail(fmt.Errorf("its manifest's attention: %w", err))
		}
	}
	if written.CrossEntropy != "" {
		if l.CrossEntropy, err = layers.ParseCrossEntropy(written.CrossEntropy); err != nil {
			return fail(fmt.Errorf("its manifest's cross-entropy: %w", err))
		}
	}
	if err := l.checkVariables(folder); err != nil {
		return fail(err)
	}
	ctx := context.New()
	if _, err := folder.Restore(ctx); err != nil {
		return nil, err
	}
	if err := checkRestoredStep(ctx, folder); err != nil {
		return nil, err
	}
	// The checkpoint holds the variables: the graphs find them instead of creating them.
	l.Ctx = ctx.Checked(false)
	return l, nil
}

// Settings are the settings of l's graphs: evaluation mode (no dropout), the checkpoint's
// policy, nothing rematerialized, attention and the loss as l's fields say.
func (l *Loaded) Settings() Settings {
	return Settings{Policy: l.Policy, Attention: l.Attention, CrossEntropy: l.CrossEntropy}
}

// lossFn is the evaluation graph: the mean loss, then each metric's mean.
func (l *Loaded) lossFn(ctx *context.Context, inputs []*graph.Node) []*graph.Node {
	l.Settings().Apply(ctx, inputs[0].Graph())
	loss, metrics := l.Model.Loss(ctx, inputs)
	out := []*graph.Node{loss.Value()}
	for _, m := range metrics {
		out = append(out, m.Value())
	}
	return out
}

// checkVariables refuses a checkpoint that lacks a variable of the model's evaluation graph, or
// holds it in another shape, naming each: the graph would otherwise create it from scratch.
func (l *Loaded) checkVariables(folder *checkpoint.Folder) error {
	held, err := folder.Variables()
	if err != nil {
		return err
	}
	ctx := context.New()
	p, err := analysis.ContextProgram(l.Backend, ctx, "variables", l.Model.InputShapes(1), l.lossFn)
	if err != nil {
		return err
	}
	p.Graph.Finalize()
	var diffs []string
	for v := range ctx.IterVariables() {
		name := v.ScopeAndName()
		switch h, ok := held[name]; {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("variable %s: this checkpoint has none; the model has %s", name, v.Shape()))
		case !h.Equal(v.Shape()):
			diffs = append(diffs, fmt.Sprintf("variable %s: this checkpoint holds %s; the model has %s", name, h, v.Shape()))
		}
	}
	if len(diffs) == 0 {
		return nil
	}
	sort.Strings(diffs)
	return &checkpoint.ConfigMismatchError{Dir: folder.Dir(), Differences: diffs}
}

// Loss returns the model's mean loss on batch (the tensors a data.Data's Batch returns, of any
// batch size: InputShapes(n) for the n of axis 0) and its metrics by name (Model.MetricNames), in
// evaluation mode (no dropout) under the checkpoint's policy. The first call of a batch size
// compiles the graph.
func (l *Loaded) Loss(batch []*tensors.Tensor) (loss float64, metrics map[string]float64, err error) {
	if len(batch) == 0 || batch[0] == nil || batch[0].Shape().Rank() == 0 {
		return 0, nil, fmt.Errorf("loss: an empty batch; the model takes %v for a batch of n", l.Model.InputShapes(1))
	}
	n := batch[0].Shape().Dim(0)
	want := l.Model.InputShapes(n)
	if len(batch) != len(want) {
		return 0, nil, fmt.Errorf("loss: a batch of %d tensors, the model takes %d (%v)", len(batch), len(want), want)
	}
	for i, b := range batch {
		if b == nil || !b.Shape().Equal(want[i]) {
			return 0, nil, fmt.Errorf("loss: input #%d of the batch is %v, the model takes %s for a batch of %d", i, shapeOf(b), want[i], n)
		}
	}
	var outs []*tensors.Tensor
	err = panics.Catch(func() {
		if l.loss == nil {
			exec, err := context.NewExec(l.Backend, l.Ctx, l.lossFn)
			if err != nil {
				panic(err)
			}
			l.loss = exec.WithName("eval_loss")
		}
		var err error
		if outs, err = l.loss.Exec(args(batch)...); err != nil {
			panic(err)
		}
	})
	if err != nil {
		return 0, nil, fmt.Errorf("loss: %w", err)
	}
	metrics = map[string]float64{}
	for i, name := range l.Model.MetricNames() {
		metrics[name] = scalar(outs[1+i])
	}
	return scalar(outs[0]), metrics, nil
}

func shapeOf(t *tensors.Tensor) any {
	if t == nil {
		return "nil"
	}
	return t.Shape()
}

// Close releases the compiled graph, and the backend when Load created it.
func (l *Loaded) Close() {
	if l.loss != nil {
		l.loss.Finalize()
		l.loss = nil
	}
	if l.ownBackend && l.Backend != nil {
		l.Backend.Finalize()
		l.Backend = nil
	}
}
