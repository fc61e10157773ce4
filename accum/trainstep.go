package accum

import (
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// StepFn is a train step as context.NewExec and analysis.ContextProgram take
// it: the inputs are the batch, the outputs the loss and metrics; variable updates are returned by
// the executor. optim.Chain.StepFn builds one from a LossFn.
type StepFn = func(ctx *context.Context, inputs []*graph.Node) []*graph.Node
