package train

import (
	"fmt"
	"time"

	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// A streamed step brings each stage's gradient sums to the host in the background: once a stage's
// backward pass over every micro-batch is done, its sums go to a goroutine (downloads) that brings
// them to host memory, adds those of a weight two stages share (tied embeddings) and hands each
// host stage its gradients (stream_host.go), while the device goes on with the next stage. The
// device holds the sums until they are on the host: at most two stages' (the running one's and
// the last one's on their way: a stage's sums are queued once the last stage's are on the host),
// the last one's counted in the device budget until the next are queued (pending), whether or not
// they arrived, so that the footprint does not depend on timing. Under a device budget that leaves
// no room for them (the last step's peak plus the largest stage's sums above it, and in the first
// step), each stage's sums reach the host before the device goes on (streamExecutor.syncDownloads).

// gradientSums are one stage instance's gradient sums on the device, at position at of the
// backward pass, for the trainable variables of its sources (in st.trainable's order).
type gradientSums struct {
	st      *streamStage
	sources []*context.Variable
	sums    []*tensors.Tensor
	at      int
	// fetched is closed once the sums are on the host (or freed, after an error).
	fetched chan struct{}
}

// downloads is a step's gradient traffic to the host.
type downloads struct {
	p    *streamPass
	jobs chan gradientSums
	done chan struct{}
	// last is the last queued stage's fetched; pending its sums' device bytes until the next are
	// queued or the step waits for every download (the budget counts them on the device).
	last    chan struct{}
	pending int64
	// took is the downloads' own time; err the first error (both read after done).
	took   time.Duration
	err    error
	closed bool
}

// startDownloads starts the step's downloads.
func (p *streamPass) startDownloads() {
	d := &downloads{p: p, jobs: make(chan gradientSums, p.s.model.Blocks()+2), done: make(chan struct{})}
	p.downloads = d
	go d.loop()
}

// download queues the gradient sums of the stage instance at position at of the backward pass
// (p.acc, which it takes) for the host.
func (p *streamPass) download(st *streamStage, sources []*context.Variable, at int) error {
	acc := p.acc
	p.acc = nil
	if len(acc) != len(st.trainable) {
		freeAll(acc)
		return fmt.Errorf("Config.Offload params: the %s stage's program returned %d gradients for %d trainable variables", st.name, len(acc), len(st.trainable))
	}
	var bytes int64
	for _, t := range acc {
		bytes += int64(t.Memory())
	}
	p.s.largestSums = max(p.s.largestSums, bytes)
	d := p.downloads
	start := time.Now()
	defer func() { p.transfer += time.Since(start) }()
	if d.last != nil {
		<-d.last // the last stage's sums are on the host: at most one stage's on their way
	}
	job := gradientSums{st: st, sources: sources, sums: acc, at: at, fetched: make(chan struct{})}
	d.last, d.pending = job.fetched, bytes
	d.jobs <- job
	if p.s.syncDownloads {
		<-job.fetched
		d.pending = 0
	}
	return nil
}

// wait waits for every queued download (the step waits for the transfers meanwhile) and returns
// the first error.
func (d *downloads) wait() error {
	if !d.closed {
		d.closed = true
		close(d.jobs)
	}
	start := time.Now()
	<-d.done
	d.p.transfer += time.Since(start)
	d.p.stats.DownloadSeconds = d.took.Seconds()
	d.last, d.pending = nil, 0
	return d.err
}

// loop brings each stage's sums to the host, in the order they come.
func (d *downloads) loop() {
	defer close(d.done)
	for job := range d.jobs {
		if d.err != nil { // a failed step: free the rest
			freeAll(job.sums)
			close(job.fetched)
			continue
		}
		start := time.Now()
		err := d.fetch(job)
		d.took += time.Since(start)
		if err == nil {
			err = d.handOver(job.at)
		}
		d.err = err
		close(job.fetched)
	}
}

// fetch brings one stage's sums to the host, adding them to those of the same variables from
// other stages (tied weights).
func (d *downloads) fetch(job gradientSums) error {
	p := d.p
	for k, j := range job.st.trainable {
		grad, src := job.sums[k], job.sources[j]
		bytes := int64(grad.Memory())
		if err := grad.ToLocal(); err != nil {
			freeAll(job.sums[k:])
			return fmt.Errorf("bringing the gradient of %s to the host: %w", src.ScopeAndName(), err)
		}
		p.stats.BytesToHost += bytes
		if sum := p.grads[src]; sum != nil {
			if err := addInto(sum, grad); err != nil {
				freeAll(job.sums[k:])
				return fmt.Errorf("the gradient of %s: %w", src.ScopeAndName(), err)
			}
			grad.FinalizeAll()
			continue
		}
		p.grads[src] = grad
	}
	return nil
}

// handOver hands the host update running beside the device the gradients of the host stage of
// the instance at position at of the backward pass (all there: no later instance uses them).
func (d *downloads) handOver(at int) error {
	p := d.p
	stage := p.s.hostAt[at]
	if p.host == nil || stage == nil {
		return nil
	}
	var grads []*tensors.Tensor
	for _, v := range stage.Variables() {
		g := p.grads[v]
		if g == nil {
			return fmt.Errorf("Config.Offload params: no stage computed the gradient of %s", v.ScopeAndName())
		}
		grads = append(grads, g)
		delete(p.grads, v) // the host update's now
	}
	p.host.send(stage, grads)
	return nil
}

// addInto adds b to a, element by element (float32 or float64).
func addInto(a, b *tensors.Tensor) error {
	if !a.Shape().Equal(b.Shape()) {
		return fmt.Errorf("adding gradients of shapes %s and %s", a.Shape(), b.Shape())
	}
	var err error
	b.ConstFlatData(func(bf any) {
		a.MutableFlatData(func(af any) {
			switch av := af.(type) {
			case []float32:
				for i, x := range bf.([]float32) {
					av[i] += x
				}
			case []float64:
				for i, x := range bf.([]float64) {
					av[i] += x
				}
			default:
				err = fmt.Errorf("gradients of dtype %s", a.DType())
			}
		})
	})
	return err
}
