package train

import (
	"fmt"
	"time"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/analysis"
)

// stagedPass is one staged step's state on the device: the micro-batches, the kept stage inputs,
// the cotangents, the gradients not yet applied, the running random state and the loss's sums.
type stagedPass struct {
	e *stagedExecutor
	k int
	// mbs are the micro-batches; xs[i][m] the input of block i (xs[n] the head's) for micro-batch
	// m; dxs[m] the cotangent flowing back; acc the gradient sums of the stage running backward.
	mbs [][]*tensors.Tensor
	xs  [][]*tensors.Tensor
	dxs []*tensors.Tensor
	acc []*tensors.Tensor
	// tied are the head's gradients of the variables the embedding trains too (a tied table),
	// added to the embedding's.
	tied map[*context.Variable]*tensors.Tensor
	stageCalls
	step    *stagedStep
	lossSum float32
	count   float32
	metrics [][2]float32 // sum and count of each metric
	stats   StagedStats
}

// forward splits the batch into micro-batches, sends them to the device and runs them through
// the embedding and every block, a stage at a time, keeping each stage's inputs.
func (p *stagedPass) forward(batch []*tensors.Tensor) error {
	e := p.e
	p.rngAt = map[[2]int]*tensors.Tensor{}
	if v := e.rngVar(); v != nil && v.HasValue() {
		value, err := v.Value()
		if err != nil {
			return err
		}
		if p.rng, err = value.LocalClone(); err != nil {
			return err
		}
	}
	p.mbs = make([][]*tensors.Tensor, p.k)
	for j, b := range batch {
		parts, err := splitRows(b, p.k)
		if err != nil {
			return err
		}
		for m, part := range parts {
			onDevice, err := part.OnDeviceClone(e.t.Backend, 0)
			if err != nil {
				return fmt.Errorf("sending micro-batch %d to the device: %w", m, err)
			}
			if j == 0 {
				p.mbs[m] = make([]*tensors.Tensor, len(batch))
			}
			p.mbs[m][j] = onDevice
		}
	}
	n := e.model.Blocks()
	p.xs = make([][]*tensors.Tensor, n+1)
	for i := range p.xs {
		p.xs[i] = make([]*tensors.Tensor, p.k)
	}
	if err := e.bind(e.embed, e.embedVars); err != nil {
		return err
	}
	for m := range p.k {
		outs, err := p.call(e.embed, e.embed.fwd, 0, m, false, p.mbs[m]...)
		if err != nil {
			return err
		}
		p.xs[0][m] = outs[0]
	}
	for i := range n {
		if err := e.bind(e.block, e.blockVars[i]); err != nil {
			return err
		}
		for m := range p.k {
			outs, err := p.call(e.block, e.block.fwd, i+1, m, false, append([]*tensors.Tensor{p.xs[i][m]}, p.mbs[m]...)...)
			if err != nil {
				return fmt.Errorf("block %d: %w", i, err)
			}
			p.xs[i+1][m] = outs[0]
		}
	}
	return nil
}

// backward runs the head (loss and its cotangent), then every block in reverse and the
// embedding, recomputing and differentiating each, and hands each stage's gradients to the
// update as they are complete.
func (p *stagedPass) backward() error {
	e := p.e
	n := e.model.Blocks()
	p.dxs = make([]*tensors.Tensor, p.k)
	p.tied = map[*context.Variable]*tensors.Tensor{}
	nm := len(e.t.Config.Model.MetricNames())
	p.metrics = make([][2]float32, nm)
	if err := e.bind(e.head, e.headVars); err != nil {
		return err
	}
	for m := range p.k {
		outs, err := p.call(e.head, e.head.bwd, n+1, m, false, append([]*tensors.Tensor{p.xs[n][m]}, p.mbs[m]...)...)
		if err != nil {
			return fmt.Errorf("the head: %w", err)
		}
		p.lossSum += tensors.ToScalar[float32](outs[0])
		p.count += tensors.ToScalar[float32](outs[1])
		for j := range nm {
			p.metrics[j][0] += tensors.ToScalar[float32](outs[2+2*j])
			p.metrics[j][1] += tensors.ToScalar[float32](outs[3+2*j])
		}
		for _, o := range outs[:2+2*nm] {
			o.FinalizeAll()
		}
		p.dxs[m] = outs[2+2*nm]
		p.xs[n][m].FinalizeAll()
		p.xs[n][m] = nil
		if p.acc, err = accumulate(e.t.Backend, e.head, p.acc, outs[3+2*nm:]); err != nil {
			return err
		}
	}
	var err error
	if p.step, err = e.update.begin(p.count * float32(e.norm)); err != nil {
		return err
	}
	if err := p.complete(e.head, e.headVars); err != nil {
		return err
	}
	for i := n - 1; i >= 0; i-- {
		if err := e.bind(e.block, e.blockVars[i]); err != nil {
			return err
		}
		for m := range p.k {
			outs, err := p.call(e.block, e.block.bwd, i+1, m, true, append([]*tensors.Tensor{p.xs[i][m], p.dxs[m]}, p.mbs[m]...)...)
			if err != nil {
				return fmt.Errorf("block %d: %w", i, err)
			}
			p.dxs[m].FinalizeAll()
			p.xs[i][m].FinalizeAll()
			p.dxs[m], p.xs[i][m] = outs[0], nil
			if p.acc, err = accumulate(e.t.Backend, e.block, p.acc, outs[1:]); err != nil {
				return err
			}
		}
		if err := p.complete(e.block, e.blockVars[i]); err != nil {
			return fmt.Errorf("block %d: %w", i, err)
		}
	}
	if len(e.embed.trainable) == 0 {
		return nil // nothing to differentiate (a LoRA run's frozen embedding)
	}
	if err := e.bind(e.embed, e.embedVars); err != nil {
		return err
	}
	for m := range p.k {
		outs, err := p.call(e.embed, e.embed.bwd, 0, m, true, append(append([]*tensors.Tensor{}, p.mbs[m]...), p.dxs[m])...)
		if err != nil {
			return fmt.Errorf("the embedding: %w", err)
		}
		p.dxs[m].FinalizeAll()
		p.dxs[m] = nil
		if p.acc, err = accumulate(e.t.Backend, e.embed, p.acc, outs); err != nil {
			return err
		}
	}
	return p.complete(e.embed, e.embedVars)
}

// complete hands the gradient sums of the stage instance that just ran backward (st's programs,
// the variables sources) to the update: the head keeps those of the variables the embedding
// trains too until the embedding's are added to them.
func (p *stagedPass) complete(st *streamStage, sources []*context.Variable) error {
	e := p.e
	acc := p.acc
	p.acc = nil
	if len(acc) != len(st.trainable) {
		freeAll(acc)
		return fmt.Errorf("Config.Offload staged: the %s stage's program returned %d gradients for %d trainable variables", st.name, len(acc), len(st.trainable))
	}
	grads := map[*context.Variable]*tensors.Tensor{}
	for k, j := range st.trainable {
		src := sources[j]
		switch {
		case st == e.head && e.update.tied[src]:
			p.tied[src] = acc[k]
		case st == e.embed && p.tied[src] != nil:
			sum, err := accumulate(e.t.Backend, e.embed, []*tensors.Tensor{acc[k]}, []*tensors.Tensor{p.tied[src]})
			delete(p.tied, src)
			if err != nil {
				return err
			}
			grads[src] = sum[0]
		default:
			grads[src] = acc[k]
		}
	}
	start := time.Now()
	held, err := p.step.take(grads)
	p.stats.UpdateSeconds += time.Since(start).Seconds()
	p.stats.GradientBytes = max(p.stats.GradientBytes, held)
	return err
}

// finish ends the update and returns the step's outputs as StepFn's: the loss, the metrics, the
// count, the finite flag and the moving-average loss.
func (p *stagedPass) finish() ([]*tensors.Tensor, *graph.Graph, error) {
	e := p.e
	loss := p.lossSum / nonZero32(p.count)
	start := time.Now()
	updateOuts, err := p.step.finish(loss)
	if err != nil {
		return nil, nil, fmt.Errorf("the update: %w", err)
	}
	p.stats.UpdateSeconds += time.Since(start).Seconds()
	if p.rng != nil {
		if err := e.rngVar().SetValue(p.rng); err != nil {
			return nil, nil, err
		}
		p.rng = nil
	}
	outs := []*tensors.Tensor{tensors.FromScalar(loss)}
	for _, mt := range p.metrics {
		outs = append(outs, tensors.FromScalar(mt[0]/nonZero32(mt[1])))
	}
	outs = append(outs, tensors.FromScalar(p.count))
	p.stats.DeviceSeconds = p.device.Seconds()
	last := p.stats
	e.last = &last
	return append(outs, updateOuts...), p.ran, nil
}

// call runs a stage's program (stageCalls.call) and accounts for the device's footprint.
func (p *stagedPass) call(st *streamStage, exec *context.Exec, i, m int, backward bool, args ...*tensors.Tensor) ([]*tensors.Tensor, error) {
	return p.stageCalls.call(p.e.stageLayout, st, exec, i, m, backward, func(g *graph.Graph, _ []*tensors.Tensor) error {
		p.account(g)
		return nil
	}, args...)
}

// account records the device footprint at a run of g (after it: its outputs are held): the
// variables, the buffers the step holds and what g allocates besides its arguments by XLA's
// account.
func (p *stagedPass) account(g *graph.Graph) {
	e := p.e
	extra, ok := e.compiled[g]
	if !ok {
		extra = -1
		if mem, err := analysis.CompiledMemoryOf(g); err == nil {
			extra = mem.TotalBytes() - mem.ArgumentBytes
		}
		e.compiled[g] = extra
	}
	live := e.resident + p.step.heldBytes() + max(extra, 0)
	for _, group := range append(append([][]*tensors.Tensor{p.acc, p.dxs}, p.mbs...), p.xs...) {
		for _, t := range group {
			if t != nil && t.Ok() {
				live += int64(t.Memory())
			}
		}
	}
	for _, t := range p.tied {
		live += int64(t.Memory())
	}
	p.stats.DevicePeakBytes = max(p.stats.DevicePeakBytes, live)
}

// free releases what a failed step left on the device.
func (p *stagedPass) free() {
	for _, group := range append(append([][]*tensors.Tensor{p.acc, p.dxs}, p.mbs...), p.xs...) {
		freeAll(group)
	}
	for _, t := range p.tied {
		t.FinalizeAll()
	}
	if p.step != nil {
		p.step.free()
	}
}
