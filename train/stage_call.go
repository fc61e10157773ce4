package train

import (
	"time"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// stageCalls runs a step's stage programs one call at a time, for the modes that run the step a
// stage at a time (streamed and staged): it carries the random state from call to call, so that a
// backward call recomputes its forward call's dropout, and times the device.
type stageCalls struct {
	rng    *tensors.Tensor            // the running random state (local), nil without one
	rngAt  map[[2]int]*tensors.Tensor // the state each stage instance's forward call started from
	device time.Duration              // the programs' time
	ran    *graph.Graph               // the last program run
}

// call runs a stage's program on args for micro-batch m of stage instance i, with the random
// state the instance's forward call started from (backward) or the running one (forward), which
// a forward call advances; account is told of each run (its graph and outputs) before the state
// advances.
func (c *stageCalls) call(layout *stageLayout, st *streamStage, exec *context.Exec, i, m int, backward bool,
	account func(g *graph.Graph, outs []*tensors.Tensor) error, args ...*tensors.Tensor) ([]*tensors.Tensor, error) {
	if st.rng >= 0 && c.rng != nil {
		state := c.rng
		if backward {
			state = c.rngAt[[2]int{i, m}]
		}
		clone, err := state.LocalClone()
		if err != nil {
			return nil, err
		}
		if err := layout.setTemplate(st, st.rng, layout.rngVar(), clone); err != nil {
			return nil, err
		}
	}
	in := make([]any, len(args))
	for j, a := range args {
		in[j] = a
	}
	start := time.Now()
	outs, g, err := exec.ExecWithGraph(in...)
	c.device += time.Since(start)
	if err != nil {
		return nil, err
	}
	c.ran = g
	if exec == st.bwd {
		st.ran[1] = g
	} else {
		st.ran[0] = g
	}
	if err := account(g, outs); err != nil {
		return nil, err
	}
	if st.rng >= 0 && c.rng != nil && !backward {
		next, err := st.vars[st.rng].Value()
		if err != nil {
			return nil, err
		}
		c.rngAt[[2]int{i, m}] = c.rng
		if c.rng, err = next.LocalClone(); err != nil {
			return nil, err
		}
	}
	return outs, nil
}
