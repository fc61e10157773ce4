package train

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/onegpu/onegpu/analysis"
)

// account records the device footprint at a run of st's program g on args (and st's weights),
// which returned outs: the program's memory by XLA's account (its arguments, outputs and
// temporaries; on the embedded backend, which gives none, its arguments and outputs) plus the
// other buffers the step holds on the device, the next stage's weights on their way included. It returns an error when that exceeds the run's
// device budget.
func (p *streamPass) account(st *streamStage, g *graph.Graph, args, outs []*tensors.Tensor) error {
	s := p.s
	inputs := map[*tensors.Tensor]bool{}
	for _, a := range args {
		inputs[a] = true
	}
	for _, v := range st.vars {
		if v != nil && v.HasValue() {
			value, _ := v.Value()
			inputs[value] = true
		}
	}
	program, ok := s.compiled[g]
	if !ok {
		if mem, err := analysis.CompiledMemoryOf(g); err == nil {
			program = mem.TotalBytes()
			s.compiled[g] = program
		} else {
			program = -1 // not XLA: count arguments and outputs
		}
	}
	if program < 0 {
		program = 0
		for t := range inputs {
			program += int64(t.Memory())
		}
		for _, o := range outs {
			program += int64(o.Memory())
		}
	}
	live := int64(0)
	for _, group := range append(append([][]*tensors.Tensor{p.acc, p.dxs}, p.mbs...), p.xs...) {
		for _, t := range group {
			if t != nil && t.Ok() && !inputs[t] {
				live += int64(t.Memory())
			}
		}
	}
	if p.next != nil {
		live += p.next.bytes // the next instance's weights, on their way
	}
	if p.downloads != nil {
		live += p.downloads.pending // the last stage's gradient sums, on their way
	}
	footprint := live + program
	p.stats.DevicePeakBytes = max(p.stats.DevicePeakBytes, footprint)
	if budget := s.t.Config.DeviceBudget; budget > 0 && footprint > budget {
		return fmt.Errorf("the %s stage's program needs %s on the device (%s by XLA's account, %s of kept stage inputs, cotangents and gradient sums): "+
			"more than the device budget, %s; use fewer or smaller micro-batches, remat inside the block, or a larger budget",
			st.name, analysis.FormatBytes(footprint), analysis.FormatBytes(program), analysis.FormatBytes(live), analysis.FormatBytes(budget))
	}
	return nil
}
