package train

import (
	"fmt"
	"reflect"
	"time"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// streamPass is one streamed step's state: the micro-batches and the kept stage inputs on the
// device, the running random state, the loss's sums and the gradients brought to the host.
type streamPass struct {
	s *streamExecutor
	k int
	// mbs are the micro-batches on the device; xs[i][m] the input of block i (xs[n] the head's) for
	// micro-batch m; dxs[m] the cotangent flowing back.
	mbs [][]*tensors.Tensor
	xs  [][]*tensors.Tensor
	dxs []*tensors.Tensor
	stageCalls
	lossSum  float32
	count    float32
	metrics  [][2]float32                          // sum and count of each metric
	grads    map[*context.Variable]*tensors.Tensor // gradient sums on the host
	acc      []*tensors.Tensor                     // the gradient sums of the stage running backward, on the device
	stats    StreamStats
	transfer time.Duration // waiting for uploads and downloads
	upload   time.Duration // the uploads' own time, hidden behind computation or not
	// host is the step's host update running beside the device (nil: serialized, after the
	// backward pass); start is when the step began.
	host  *hostRun
	start time.Time
	// downloads bring the gradient sums to the host in the background (stream_download.go).
	downloads *downloads
	// order lists the stage instances' sources in the order the step binds them; at is the next
	// one's index and next its upload, under way.
	order [][]*context.Variable
	at    int
	next  *pendingUpload
}

// forward splits the batch into micro-batches, sends them to the device and runs them through
// the embedding and every block, a stage at a time, keeping each stage's inputs.
func (p *streamPass) forward(batch []*tensors.Tensor) error {
	s, device := p.s, p.s.t.Backend
	p.rngAt = map[[2]int]*tensors.Tensor{}
	if v := s.rngVar(); v != nil && v.HasValue() {
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
			onDevice, err := part.OnDeviceClone(device, 0)
			if err != nil {
				return fmt.Errorf("sending micro-batch %d to the device: %w", m, err)
			}
			p.stats.BytesToDevice += int64(onDevice.Memory())
			if j == 0 {
				p.mbs[m] = make([]*tensors.Tensor, len(batch))
			}
			p.mbs[m][j] = onDevice
		}
	}
	n := s.model.Blocks()
	p.xs = make([][]*tensors.Tensor, n+1)
	for i := range p.xs {
		p.xs[i] = make([]*tensors.Tensor, p.k)
	}
	if err := p.bind(s.embed, s.embedVars); err != nil {
		return err
	}
	for m := range p.k {
		outs, err := p.call(s.embed, s.embed.fwd, 0, m, false, p.mbs[m]...)
		if err != nil {
			return err
		}
		p.xs[0][m] = outs[0]
	}
	s.unbind(s.embed)
	for i := range n {
		if err := p.bind(s.block, s.blockVars[i]); err != nil {
			return err
		}
		for m := range p.k {
			outs, err := p.call(s.block, s.block.fwd, i+1, m, false, append([]*tensors.Tensor{p.xs[i][m]}, p.mbs[m]...)...)
			if err != nil {
				return fmt.Errorf("block %d: %w", i, err)
			}
			p.xs[i+1][m] = outs[0]
		}
		s.unbind(s.block)
	}
	return nil
}

// backward runs the head (loss and its cotangent), then every block in reverse and the
// embedding, recomputing and differentiating each and bringing its gradients to the host.
func (p *streamPass) backward() error {
	s, device := p.s, p.s.t.Backend
	n := s.model.Blocks()
	p.grads = map[*context.Variable]*tensors.Tensor{}
	p.startDownloads()
	p.dxs = make([]*tensors.Tensor, p.k)
	nm := len(s.t.Config.Model.MetricNames())
	p.metrics = make([][2]float32, nm)
	if err := p.bind(s.head, s.headVars); err != nil {
		return err
	}
	for m := range p.k {
		outs, err := p.call(s.head, s.head.bwd, n+1, m, false, append([]*tensors.Tensor{p.xs[n][m]}, p.mbs[m]...)...)
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
		if p.acc, err = accumulate(device, s.head, p.acc, outs[3+2*nm:]); err != nil {
			return err
		}
	}
	s.unbind(s.head)
	if p.host != nil {
		p.host.begin(p.denominator())
	}
	if err := p.download(s.head, s.headVars, 0); err != nil {
		return err
	}
	for i := n - 1; i >= 0; i-- {
		if err := p.bind(s.block, s.blockVars[i]); err != nil {
			return err
		}
		for m := range p.k {
			outs, err := p.call(s.block, s.block.bwd, i+1, m, true, append([]*tensors.Tensor{p.xs[i][m], p.dxs[m]}, p.mbs[m]...)...)
			if err != nil {
				return fmt.Errorf("block %d: %w", i, err)
			}
			p.dxs[m].FinalizeAll()
			p.xs[i][m].FinalizeAll()
			p.dxs[m], p.xs[i][m] = outs[0], nil
			if p.acc, err = accumulate(device, s.block, p.acc, outs[1:]); err != nil {
				return err
			}
		}
		s.unbind(s.block)
		if err := p.download(s.block, s.blockVars[i], n-i); err != nil {
			return err
		}
	}
	if len(s.embed.trainable) == 0 {
		return p.downloads.wait() // nothing to differentiate (a LoRA run's frozen embedding)
	}
	if err := p.bind(s.embed, s.embedVars); err != nil {
		return err
	}
	for m := range p.k {
		outs, err := p.call(s.embed, s.embed.bwd, 0, m, true, append(append([]*tensors.Tensor{}, p.mbs[m]...), p.dxs[m])...)
		if err != nil {
			return fmt.Errorf("the embedding: %w", err)
		}
		p.dxs[m].FinalizeAll()
		p.dxs[m] = nil
		if p.acc, err = accumulate(device, s.embed, p.acc, outs); err != nil {
			return err
		}
	}
	s.unbind(s.embed)
	if err := p.download(s.embed, s.embedVars, n+1); err != nil {
		return err
	}
	return p.downloads.wait()
}

// denominator is what the step's gradient sums divide by: the loss's count times the exact
// normalization each micro-batch's loss sum was multiplied by (1 for no count).
func (p *streamPass) denominator() float32 { return nonZero32(p.count * float32(p.s.norm)) }

// update runs the host's update and returns the step's outputs as StepFn's: the loss, the
// metrics, the count, the finite flag and the moving-average loss.
func (p *streamPass) update() ([]*tensors.Tensor, *graph.Graph, error) {
	s := p.s
	loss := p.lossSum / nonZero32(p.count)
	start := time.Now()
	var apply bool
	var err error
	if p.host != nil {
		apply, err = p.host.finish()
		p.stats.HostSeconds = p.host.busy.Seconds()
		p.stats.Speculated, p.stats.Undone = p.host.speculated, p.host.undone
	} else {
		for _, v := range s.trainable {
			if p.grads[v] == nil {
				return nil, nil, fmt.Errorf("Config.Offload params: no stage computed the gradient of %s", v.ScopeAndName())
			}
		}
		apply, err = s.update.apply(p.grads, p.denominator())
		p.stats.HostSeconds = time.Since(start).Seconds()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("the host's optimizer update: %w", err)
	}
	p.stats.HostWaitSeconds = time.Since(start).Seconds()
	hostOuts, err := s.update.outputs(loss, apply)
	if err != nil {
		return nil, nil, err
	}
	if p.rng != nil {
		if err := s.rngVar().SetValue(p.rng); err != nil {
			return nil, nil, err
		}
		p.rng = nil
	}
	outs := []*tensors.Tensor{tensors.FromScalar(loss)}
	for _, mt := range p.metrics {
		outs = append(outs, tensors.FromScalar(mt[0]/nonZero32(mt[1])))
	}
	outs = append(outs, tensors.FromScalar(p.count))
	p.stats.TransferSeconds, p.stats.DeviceSeconds = p.transfer.Seconds(), p.device.Seconds()
	p.stats.UploadSeconds = p.upload.Seconds()
	p.stats.Overlapped = p.host != nil
	if s.syncDownloads { // the sums may go on while the next stage runs if the budget has room
		s.syncDownloads = p.stats.DevicePeakBytes+s.largestSums > s.t.Config.DeviceBudget
	}
	p.stats.StepSeconds = time.Since(p.start).Seconds()
	p.stats.OverlapRatio = p.stats.overlapRatio()
	last := p.stats
	s.last = &last
	return append(outs, hostOuts...), p.ran, nil
}

// nonZero32 is x, or 1 for 0 (as accum's safe division).
func nonZero32(x float32) float32 {
	if x == 0 {
		return 1
	}
	return x
}

// A step binds its stage instances in a fixed order (the embedding, the blocks, the head, the
// blocks in reverse, the embedding): while one computes, the next one's weights are sent to the
// device in the background (double buffering), so the step waits only for what the computation
// did not hide.

// pendingUpload is a stage instance's weights on their way to the device.
type pendingUpload struct {
	done   chan struct{}
	clones []*tensors.Tensor
	sent   int64
	took   time.Duration
	err    error
	// bytes are the device bytes the upload holds once done (counted in the budget meanwhile).
	bytes int64
}

// startUpload sends sources to the device in the background.
func (p *streamPass) startUpload(sources []*context.Variable) *pendingUpload {
	u := &pendingUpload{done: make(chan struct{})}
	for _, src := range sources {
		if src != p.s.rngVar() {
			u.bytes += int64(src.Shape().Memory())
		}
	}
	if p.s.copies != nil {
		u.bytes += narrowTransient(sources, p.s.narrowAt(sources))
	}
	go func() {
		defer close(u.done)
		start := time.Now()
		u.clones, u.sent, u.err = p.s.upload(sources)
		u.took = time.Since(start)
	}()
	return u
}

// sameSources reports whether a and b are the same slice of variables.
func sameSources(a, b []*context.Variable) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// bindOrder is the order in which a step binds its stage instances' sources.
func (p *streamPass) bindOrder() [][]*context.Variable {
	s := p.s
	order := [][]*context.Variable{s.embedVars}
	order = append(order, s.blockVars...)
	order = append(order, s.headVars)
	for i := len(s.blockVars) - 1; i >= 0; i-- {
		order = append(order, s.blockVars[i])
	}
	if len(s.embed.trainable) == 0 {
		return order // the embedding is not run backward
	}
	return append(order, s.embedVars)
}

// bind puts a stage instance's weights in its template, waiting for their upload (started while
// the previous instance computed, or now for the first), and starts the next instance's upload.
func (p *streamPass) bind(st *streamStage, sources []*context.Variable) error {
	if p.order == nil {
		p.order = p.bindOrder()
	}
	u := p.next
	if u == nil || p.at >= len(p.order) || !sameSources(p.order[p.at], sources) {
		if u != nil { // not the instance expected: a bug, but never a wrong weight
			<-u.done
			freeAll(u.clones)
		}
		u = p.startUpload(sources)
	}
	p.next = nil
	start := time.Now()
	<-u.done
	p.transfer += time.Since(start)
	p.upload += u.took
	p.stats.BytesToDevice += u.sent
	if u.err != nil {
		return u.err
	}
	if err := p.s.install(st, sources, u.clones); err != nil {
		return err
	}
	p.at++
	if p.at < len(p.order) {
		p.next = p.startUpload(p.order[p.at])
	}
	return nil
}

// call runs a stage's program (stageCalls.call) and accounts for the device's footprint.
func (p *streamPass) call(st *streamStage, exec *context.Exec, i, m int, backward bool, args ...*tensors.Tensor) ([]*tensors.Tensor, error) {
	return p.stageCalls.call(p.s.stageLayout, st, exec, i, m, backward, func(g *graph.Graph, outs []*tensors.Tensor) error {
		return p.account(st, g, args, outs)
	}, args...)
}

// splitRows cuts t into k equal parts along axis 0, as local tensors.
func splitRows(t *tensors.Tensor, k int) ([]*tensors.Tensor, error) {
	if k == 1 {
		return []*tensors.Tensor{t}, nil
	}
	dims := append([]int{}, t.Shape().Dimensions...)
	if len(dims) == 0 || dims[0]%k != 0 {
		return nil, fmt.Errorf("a batch input of shape %s does not split into %d micro-batches", t.Shape(), k)
	}
	dims[0] /= k
	per := t.Shape().Size() / k
	parts := make([]*tensors.Tensor, k)
	err := t.ConstFlatData(func(flat any) {
		v := reflect.ValueOf(flat)
		for m := range k {
			part := tensors.FromShape(shapes.Make(t.DType(), dims...))
			part.MutableFlatData(func(pf any) {
				reflect.Copy(reflect.ValueOf(pf), v.Slice(m*per, (m+1)*per))
			})
			parts[m] = part
		}
	})
	return parts, err
}

// free releases what a failed step left on the device, and an upload under way, and stops the
// host update of a step that failed.
func (p *streamPass) free() {
	if p.downloads != nil {
		_ = p.downloads.wait() // before the host update stops: they feed it
	}
	if p.host != nil {
		p.host.abandon()
	}
	if p.next != nil {
		<-p.next.done
		freeAll(p.next.clones)
		p.next = nil
	}
	for _, group := range append(append([][]*tensors.Tensor{p.acc}, p.mbs...), append(p.xs, p.dxs)...) {
		for _, t := range group {
			if t != nil {
				t.FinalizeAll()
			}
		}
	}
}
