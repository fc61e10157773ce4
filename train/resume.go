package train

import (
	"fmt"
	"sort"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/optim"
	"github.com/onegpu/onegpu/train/checkpoint"
)

// checkVariables refuses to resume from store's checkpoint when its variables are not those of
// this run's step, naming each weight (trainable or frozen: graph.IsWeight) that differs: a model of
// other sizes holds a weight of another shape, lacks one the checkpoint has, or has one the
// checkpoint lacks. (The optimizer state that follows from them is named only when no weight
// differs.) A LoRA run's frozen base is not in its checkpoints and not compared here (see
// checkpoint.Folder.CheckBase). The step is built once, in a fresh context, to know them; nothing
// is compiled.
func (t *Trainer) checkVariables(store *checkpoint.Folder) error {
	held, err := store.Variables()
	if err != nil {
		return err
	}
	ctx := context.New()
	p, err := analysis.ContextProgram(t.Backend, ctx, "variables", t.StepShapes(), t.StepFn())
	if err != nil {
		return err
	}
	p.Graph.Finalize()
	want, weight := map[string]shapes.Shape{}, map[string]bool{}
	stateOnly := map[string]bool{} // top scopes that hold no weight: the optimizer's, the loss scale's, ...
	for v := range ctx.IterVariables() {
		name := v.ScopeAndName()
		if t.Config.LoRA.Active() && analysis.IsFrozen(ctx, v) {
			continue // the base, which the run makes again: its checkpoints hold the adapters
		}
		want[name], weight[name] = v.Shape(), analysis.IsWeight(ctx, v) // trainable or frozen: the model's
		top := topScope(name)
		if _, seen := stateOnly[top]; !seen {
			stateOnly[top] = true
		}
		stateOnly[top] = stateOnly[top] && !weight[name]
	}
	rng := context.JoinScope(context.RootScope, context.RNGStateVariableName)
	var params, state []string
	add := func(isParam bool, line string) {
		if isParam {
			params = append(params, line)
		} else {
			state = append(state, line)
		}
	}
	for name, s := range want {
		switch h, ok := held[name]; {
		case name == rng:
		case !ok:
			add(weight[name], fmt.Sprintf("variable %s: this checkpoint has none; the model has %s", name, s))
		case !h.Equal(s):
			add(weight[name], fmt.Sprintf("variable %s: this checkpoint holds %s; the model has %s", name, h, s))
		}
	}
	for name, h := range held {
		if _, ok := want[name]; !ok && name != rng {
			add(!stateOnly[topScope(name)], fmt.Sprintf("variable %s: this checkpoint holds %s; the model has no such variable", name, h))
		}
	}
	diffs := params
	if len(diffs) == 0 {
		diffs = state
	}
	if len(diffs) == 0 {
		return nil
	}
	sort.Strings(diffs)
	return &checkpoint.ConfigMismatchError{Dir: store.Dir(), Differences: diffs}
}

// topScope is the first scope of a variable's scoped name ("/AdamOptimizer" of
// "/AdamOptimizer/block_0/kernel_1st_moment"), or "/" for a variable of the root scope.
func topScope(name string) string {
	rest := strings.TrimPrefix(name, context.ScopeSeparator)
	top, _, found := strings.Cut(rest, context.ScopeSeparator)
	if !found {
		return context.RootScope
	}
	return context.ScopeSeparator + top
}

// checkResumedStep refuses a restored checkpoint whose manifest's step is not the step its
// weights hold: see checkRestoredStep.
func (t *Trainer) checkResumedStep(store *checkpoint.Folder) error {
	return checkRestoredStep(t.Ctx, store)
}

// checkRestoredStep refuses the checkpoint of store restored into ctx when its manifest's step is
// not the step its weights hold (the optimizer's global step plus the skipped steps, as
// Trainer.Steps counts them): the manifest was edited or damaged after it was written, and
// neither number can be trusted to say which batch comes next.
func checkRestoredStep(ctx *context.Context, store *checkpoint.Folder) error {
	updates := counterOf(ctx, context.RootScope, optimizers.GlobalStepVariableName)
	skipped := counterOf(ctx, optim.DefaultScope, optim.SkippedStepsVariable)
	if updates+skipped == store.ResumeStep {
		return nil
	}
	return fmt.Errorf("checkpoint %s in %s: its manifest says step %d, its weights hold step %d (%d updates, %d skipped): "+
		"the manifest was edited or damaged; nothing was trained or saved: move the checkpoint out of the folder to resume from an earlier one",
		store.ResumeFrom, store.Dir(), store.ResumeStep, updates+skipped, updates, skipped)
}
