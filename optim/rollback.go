package optim

import (
	"strings"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"
)

// OptimizersScope is GoMLX's scope for learning rates and schedules (such as cosineschedule), which
// change in the model function, before the chain runs: a gate rolls their changes back too.
const OptimizersScope = context.ScopeSeparator + optimizers.Scope

// Rollback runs build (the rest of a chain), then gives every variable that build changed in g —
// and every variable changed anywhere in g under one of the guarded absolute scopes — its value
// from before the step wherever keep is false, bit for bit: value = Where(keep, new, old).
// Variables under one of the excluded scopes are left alone (a link's own counters). It is how
// LossScale skips a non-finite step and MultiSteps holds the update until a window is complete;
// a Transform of your own that gates the rest of the chain uses it the same way.
func Rollback(ctx *context.Context, g *graph.Graph, keep *graph.Node, guarded, excluded []string, build func()) {
	before := map[*context.Variable]*graph.Node{}
	for v := range ctx.IterVariables() {
		if v.InUseByGraph(g) {
			before[v] = v.ValueGraph(g)
		}
	}
	build()
	for v := range ctx.IterVariables() {
		if !v.ChangedInGraph(g) || inAnyScope(v, excluded) {
			continue
		}
		updated := v.ValueGraph(g)
		if previous, used := before[v]; used && updated == previous && !inAnyScope(v, guarded) {
			continue // not changed by build
		}
		old := g.GetParameterByName(v.ParameterName())
		if old == nil {
			panicf("optim: variable %s changed in graph %q but has no parameter node", v.ScopeAndName(), g.Name())
		}
		v.SetValueGraph(graph.Where(keep, updated, old))
	}
}

// inAnyScope reports whether v lives in one of the absolute scopes or below it.
func inAnyScope(v *context.Variable, scopes []string) bool {
	for _, s := range scopes {
		s = strings.TrimSuffix(s, context.ScopeSeparator)
		if v.Scope() == s || strings.HasPrefix(v.Scope(), s+context.ScopeSeparator) {
			return true
		}
	}
	return false
}

// checkAbsolute panics unless every scope is absolute.
func checkAbsolute(caller string, scopes ...string) {
	for _, s := range scopes {
		if !strings.HasPrefix(s, context.ScopeSeparator) {
			panicf("%s(%q): the scope must be absolute (start with %q)", caller, s, context.ScopeSeparator)
		}
	}
}
