package gomlxcompat

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// Alias declares that a program's output is written over one of its parameters' buffers, like
// JAX's donate_argnums: when the parameter's buffer is donated at execution, XLA writes the output
// there instead of allocating a new one.
type Alias struct {
	Parameter graph.ParameterHandle // the parameter, in creation order
	Output    int                   // the output, in the order given to Graph.Compile
}

// aliasAttribute is the argument attribute JAX's donate_argnums lowers to: XLA reads it from the
// entry function's arguments as its input/output alias configuration (a "may alias": when the
// buffer is not donated, the runtime copies instead).
const aliasAttribute = "tf.aliasing_output"

// AliasOutputs declares aliases on a graph that is being built and is not compiled yet. On a
// backend other than XLA it does nothing: the embedded backend reuses donated buffers on its own.
//
// Assumption (GoMLX v0.26.0, go-xla v0.1.4): graph.Graph keeps its backend builder in the
// unexported field "builder"; for XLA it is an *xla.Builder that builds the StableHLO entry
// function in its unexported field "fn", a *stablehlo.Function whose Inputs follow the
// parameters' creation order and whose input attributes are written into the module when it is
// compiled.
func AliasOutputs(g *graph.Graph, aliases []Alias) error {
	if len(aliases) == 0 {
		return nil
	}
	fn, err := entryFunction(g)
	if err != nil || fn == nil {
		return err
	}
	if fn.Returned {
		return fmt.Errorf("graph %q is already compiled: aliases must be declared before Graph.Compile", g.Name())
	}
	seen := map[int]bool{}
	for _, a := range aliases {
		p := int(a.Parameter)
		if p < 0 || p >= len(fn.Inputs) || p >= g.NumParameters() {
			return fmt.Errorf("graph %q: alias of parameter %d, but it has %d parameters (%d in StableHLO)",
				g.Name(), p, g.NumParameters(), len(fn.Inputs))
		}
		if a.Output < 0 || seen[a.Output] {
			return fmt.Errorf("graph %q: output %d aliased twice or negative", g.Name(), a.Output)
		}
		seen[a.Output] = true
		if got, want := fn.Inputs[p].Shape().Size(), g.GetParameterByHandle(a.Parameter).Shape().Size(); got != want {
			return fmt.Errorf("graph %q: StableHLO input %d has %d elements, parameter %d has %d (GoMLX version changed?)",
				g.Name(), p, got, p, want)
		}
		in := fn.Inputs[p]
		if in.Attributes == nil {
			in.Attributes = map[string]any{}
		}
		in.Attributes[aliasAttribute] = int32(a.Output)
	}
	return nil
}

// DeclaredAliases returns the aliases declared on a graph being built on XLA (nil elsewhere).
func DeclaredAliases(g *graph.Graph) ([]Alias, error) {
	fn, err := entryFunction(g)
	if err != nil || fn == nil {
		return nil, err
	}
	var aliases []Alias
	for i, in := range fn.Inputs {
		if out, ok := in.Attributes[aliasAttribute].(int32); ok {
			aliases = append(aliases, Alias{Parameter: graph.ParameterHandle(i), Output: int(out)})
		}
	}
	return aliases, nil
}

// ContextExecAliases returns the aliases of a step that context.Exec is building from ctx on g,
// once the step function has returned: each variable changed in g is aliased to the output
// context.Exec returns its new value in. Call it at the end of the step function.
//
// Assumption (GoMLX v0.26.0, context.Exec.buildGraphFn): the graph's outputs are first the new
// values of the variables changed in the graph, in ctx.EnumerateVariables order, then the step
// function's own outputs; and context.Exec donates the buffers of exactly those variables.
func ContextExecAliases(ctx *context.Context, g *graph.Graph) []Alias {
	return UpdatedVariableAliases(ctx, g, 0)
}

// UpdatedVariableAliases aliases each variable changed in g, in ctx.EnumerateVariables order, to
// output first+i, where i counts the changed variables.
func UpdatedVariableAliases(ctx *context.Context, g *graph.Graph, first int) []Alias {
	var aliases []Alias
	ctx.EnumerateVariables(func(v *context.Variable) {
		if !v.ChangedInGraph(g) {
			return
		}
		if param := g.GetParameterByName(v.ParameterName()); param != nil {
			aliases = append(aliases, Alias{Parameter: param.GetParameterHandle(), Output: first + len(aliases)})
		} else {
			first++ // a changed variable the graph never read still takes an output
		}
	})
	return aliases
}
