package remat

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// contextState is what CheckpointCtx needs to run fn again: the value each variable and graph
// parameter had before fn, which variables fn reads or changes, which it differentiates, and
// which graph parameters it sets to values computed inside (regularization terms added with
// train.AddLoss), which leave the block as extra outputs.
type contextState struct {
	ctx *context.Context
	g   *graph.Graph
	// before is each variable's value node before fn (its parameter node when fn used it first).
	before map[*context.Variable]*graph.Node
	// reset lists the variables fn reads or changes, in the context's order: the recomputation
	// sees them as fn did.
	reset   []*context.Variable
	changed map[*context.Variable]bool
	// differentiable lists the float variables fn reads: they get a leaf and a gradient.
	differentiable []*context.Variable

	variablesBefore map[*context.Variable]*graph.Node
	paramsBefore    []graphParam
	// escaping are the graph parameters fn set to float values it computed.
	escaping []graphParam
}

type graphParam struct {
	scope, key string
	value      any
}

// newContextState records the variables and graph parameters of g before fn runs.
func newContextState(ctx *context.Context, g *graph.Graph) *contextState {
	return &contextState{ctx: ctx, g: g, variablesBefore: snapshotVariables(ctx, g), paramsBefore: graphParams(ctx, g)}
}

// snapshotVariables returns the value node of every variable g uses.
func snapshotVariables(ctx *context.Context, g *graph.Graph) map[*context.Variable]*graph.Node {
	values := map[*context.Variable]*graph.Node{}
	for v := range ctx.IterVariables() {
		if v.InUseByGraph(g) {
			values[v] = v.ValueGraph(g)
		}
	}
	return values
}

func graphParams(ctx *context.Context, g *graph.Graph) []graphParam {
	var params []graphParam
	ctx.EnumerateGraphParams(g, func(scope, key string, value any) { params = append(params, graphParam{scope, key, value}) })
	return params
}

func setGraphParams(ctx *context.Context, g *graph.Graph, params []graphParam) {
	for _, p := range params {
		ctx.InAbsPath(p.scope).SetGraphParam(g, p.key, p.value)
	}
}

// examine looks at b's forward pass: what fn read, changed and set.
func (s *contextState) examine(b *block) {
	s.before, s.changed = map[*context.Variable]*graph.Node{}, map[*context.Variable]bool{}
	variableOf := map[*graph.Node]*context.Variable{}
	for v := range s.ctx.IterVariables() {
		if !v.InUseByGraph(b.g) {
			continue
		}
		value, ok := s.variablesBefore[v]
		if !ok { // first used by fn: its value before fn is its parameter
			if value = b.g.GetParameterByName(v.ParameterName()); value == nil {
				panic(fmt.Errorf("remat.%s: cannot find the parameter of variable %s", b.caller, v.ScopeAndName()))
			}
		}
		s.before[v] = value
		variableOf[value] = v
	}
	read := map[*context.Variable]bool{}
	for _, n := range b.g.Nodes()[b.start:b.end] {
		for _, in := range n.Inputs() {
			if v, ok := variableOf[in]; ok {
				read[v] = true
			}
		}
	}
	for _, y := range b.ys {
		if v, ok := variableOf[y]; ok {
			read[v] = true
		}
	}
	for v := range s.ctx.IterVariables() {
		value, ok := s.before[v]
		if !ok {
			continue
		}
		s.changed[v] = v.ValueGraph(b.g) != value
		if read[v] || s.changed[v] {
			s.reset = append(s.reset, v)
		}
		if read[v] && differentiable(value) {
			s.differentiable = append(s.differentiable, v)
		}
	}
	previous := map[[2]string]any{}
	for _, p := range s.paramsBefore {
		previous[[2]string{p.scope, p.key}] = p.value
	}
	for _, p := range graphParams(s.ctx, b.g) {
		n, ok := p.value.(*graph.Node)
		if !ok || previous[[2]string{p.scope, p.key}] == any(n) || !differentiable(n) || int(n.Id()) < b.start || int(n.Id()) >= b.end {
			continue
		}
		s.escaping = append(s.escaping, p)
	}
}

// escapingValues returns the values of the graph parameters fn set, in the order of escaping.
func (s *contextState) escapingValues() []*graph.Node {
	values := make([]*graph.Node, len(s.escaping))
	for i, p := range s.escaping {
		values[i] = p.value.(*graph.Node)
	}
	return values
}

// publish sets the escaping graph parameters to the block's wrapped outputs for them.
func (s *contextState) publish(values []*graph.Node) {
	for i, p := range s.escaping {
		s.ctx.InAbsPath(p.scope).SetGraphParam(s.g, p.key, values[i])
	}
}

// during runs fn (the recomputation) with the context as fn saw it in the forward pass: graph
// parameters at their values before fn; read variables at their values before fn, differentiable
// ones replaced by leaves; changed ones (the RNG state) at their values before fn plus barrier
// when it is not nil, so that XLA cannot merge the recomputed random numbers with the forward
// ones. It returns the values fn set the escaping graph parameters to. Afterwards every variable
// and graph parameter gets back the value it had.
func (s *contextState) during(leaves []*graph.Node, barrier *graph.Node, fn func()) []*graph.Node {
	currentVariables, currentParams := snapshotVariables(s.ctx, s.g), graphParams(s.ctx, s.g)
	defer func() {
		for v := range s.ctx.IterVariables() {
			if value, ok := currentVariables[v]; ok {
				v.SetValueGraph(value)
			}
		}
		setGraphParams(s.ctx, s.g, currentParams)
	}()
	setGraphParams(s.ctx, s.g, s.paramsBefore)
	for _, v := range s.reset {
		value := s.before[v]
		if s.changed[v] && barrier != nil && (value.DType().IsFloat() || value.DType().IsInt()) {
			value = graph.Add(value, graph.ConvertDType(barrier, value.DType()))
		}
		v.SetValueGraph(value)
	}
	for k, v := range s.differentiable {
		v.SetValueGraph(leaves[k])
	}
	fn()
	values := make([]*graph.Node, len(s.escaping))
	after := graphParams(s.ctx, s.g)
	for i, p := range s.escaping {
		for _, q := range after {
			if q.scope == p.scope && q.key == p.key {
				values[i], _ = q.value.(*graph.Node)
			}
		}
		if values[i] == nil {
			panic(fmt.Errorf("remat.CheckpointCtx: the recomputation did not set graph parameter %q (scope %q) to a node as the forward pass did: "+
				"a checkpointed function must build the same graph each time it runs", p.key, p.scope))
		}
	}
	return values
}
