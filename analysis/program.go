package analysis

import (
	"fmt"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/internal/gomlxcompat"
	"github.com/onegpu/onegpu/internal/panics"

	_ "github.com/onegpu/onegpu/vjp" // onegpu's gradient rules, installed at import
)

// Program is a built graph described the way it will execute: what it returns, which parameter
// buffers it may consume, and what each parameter holds. Analyze reads it; nothing runs.
type Program struct {
	Graph *graph.Graph
	// Outputs are the values the program returns (never freed while it runs).
	Outputs []*graph.Node
	// Loss, when set, ends the forward pass: nodes it does not depend on belong to the backward
	// pass or the optimizer update. It improves the memory breakdown.
	Loss *graph.Node
	// Donated are parameters whose buffers the executable owns (GoMLX donates the variables a
	// step updates): they are released after their last use and may be overwritten in place.
	Donated map[graph.NodeId]bool
	// Trainable, Frozen and State mark parameters holding trainable weights, frozen weights and
	// other variables (optimizer moments, step counters, loss scales), as VariableRole tells them
	// apart. Other parameters are data inputs.
	Trainable, Frozen, State map[graph.NodeId]bool
	// NewParams marks outputs that are the updated values of trainable variables.
	NewParams map[graph.NodeId]bool
	// Aliases pair each donated parameter with the output holding its new value, declared to XLA
	// as input/output aliases (see AliasUpdatedState).
	Aliases []gomlxcompat.Alias
}

// NewProgram describes a graph built without a context: outputs as given, no donation, every
// parameter a data input.
func NewProgram(g *graph.Graph, outputs ...*graph.Node) *Program {
	return &Program{Graph: g, Outputs: outputs, Donated: map[graph.NodeId]bool{}, Trainable: map[graph.NodeId]bool{},
		Frozen: map[graph.NodeId]bool{}, State: map[graph.NodeId]bool{}, NewParams: map[graph.NodeId]bool{}}
}

// ContextProgram builds fn the way GoMLX's context.Exec runs it — fn's outputs followed by the new
// values of the variables fn changed, whose buffers are donated and, on XLA, aliased to those
// outputs — on data inputs of the given shapes, and describes it for Analyze. fn's first output is taken as the loss when it is a scalar.
//
// Nothing is executed: variables need only their shapes. A panic while building (a shape error, an
// unsupported dtype) is returned as an error.
func ContextProgram(backend backends.Backend, ctx *context.Context, name string, inputs []shapes.Shape,
	fn func(ctx *context.Context, inputs []*graph.Node) []*graph.Node) (p *Program, err error) {
	g := graph.NewGraph(backend, name)
	p, err = ContextProgramOn(g, ctx, func(g *graph.Graph) []*graph.Node {
		nodes := make([]*graph.Node, len(inputs))
		for i, s := range inputs {
			nodes[i] = graph.Parameter(g, fmt.Sprintf("input_%d", i), s)
		}
		return nodes
	}, fn)
	if err != nil {
		g.Finalize()
		return nil, err
	}
	return p, nil
}

// ContextProgramOn is ContextProgram on a graph the caller created and configured (for instance
// for XLA's auto-sharding across devices), with the data inputs that inputs creates in it.
func ContextProgramOn(g *graph.Graph, ctx *context.Context, inputs func(g *graph.Graph) []*graph.Node,
	fn func(ctx *context.Context, inputs []*graph.Node) []*graph.Node) (p *Program, err error) {
	err = panics.Catch(func() {
		outputs := fn(ctx, inputs(g))
		p = NewProgram(g, outputs...)
		if len(outputs) > 0 && outputs[0].IsScalar() {
			p.Loss = outputs[0]
		}
		for v := range ctx.IterVariables() {
			if !v.InUseByGraph(g) {
				continue
			}
			param := g.GetParameterByName(v.ParameterName())
			if param == nil {
				continue
			}
			switch VariableRole(ctx, v) {
			case RoleTrainable:
				p.Trainable[param.Id()] = true
			case RoleFrozen:
				p.Frozen[param.Id()] = true
			default:
				p.State[param.Id()] = true
			}
			if v.ChangedInGraph(g) {
				value := v.ValueGraph(g)
				p.Outputs = append(p.Outputs, value)
				p.Donated[param.Id()] = true
				p.Aliases = append(p.Aliases, gomlxcompat.Alias{Parameter: param.GetParameterHandle(), Output: len(p.Outputs) - 1})
				if v.Trainable {
					p.NewParams[value.Id()] = true
				}
			}
		}
		if err := gomlxcompat.AliasOutputs(g, p.Aliases); err != nil {
			panic(err)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("building %q: %w", g.Name(), err)
	}
	return p, nil
}
