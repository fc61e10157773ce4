package train

import (
	"fmt"
	"time"

	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/optim/hostengine"
)

// The streamed step's host update, stage by stage. Each stage instance (the head, the blocks from
// the last, the embedding: the order the backward pass finishes them) has a stage of the host
// engine with the trainable variables whose last gradient it computes (the embedding's holds a
// table the head shares). While the device computes a stage's backward pass, a host goroutine
// updates the stages whose gradients arrived (hostRun), so that the step waits for the host only
// for the last stage's update.
//
// The chain's step-wide conditions need every gradient: a loss scale skips a step whose gradients
// are not finite anywhere, a global-norm clip scales every gradient by the step's norm. The host
// speculates (hostengine.Step.Speculate: SuperOffload's speculation, exact): it updates each stage
// assuming the step applies unclipped, after saving what the update overwrites (the stage's undo
// record, saved while the host is idle in the forward pass); once the last gradient is in, Decide
// puts back the stages the decision does not keep (all of them in a skipped step, all when the clip
// acts, which the host then updates again with the clip's factor from the gradients it kept). Every
// variable ends as in the serialized update, bit for bit. Without a loss scale and a clip nothing
// is saved: every update stands.
//
// Config.SerialHostUpdate runs the serialized update instead (every stage after the backward pass,
// as the optimizer offload does), to compare.

// startHost prepares the host update (creating and initializing the optimizer's state on the host
// engine) with a stage per stage instance, in the order the backward pass finishes them
// (s.hostAt: nil where an instance has no trainable variable of its own): the trainable variables
// an instance uses that no instance after it in that order uses.
func (s *streamExecutor) startHost() error {
	order := s.backwardOrder()
	owner := map[*context.Variable]int{}
	trainable := map[*context.Variable]bool{}
	for _, v := range s.trainable {
		trainable[v] = true
	}
	for at := len(order) - 1; at >= 0; at-- {
		for _, v := range order[at] {
			if _, owned := owner[v]; trainable[v] && !owned {
				owner[v] = at
			}
		}
	}
	sets := map[string][]*context.Variable{}
	name := make([]string, len(order))
	for _, v := range s.trainable { // the context's order
		at := owner[v]
		if name[at] == "" {
			name[at] = s.instanceName(at)
		}
		sets[name[at]] = append(sets[name[at]], v)
	}
	// The engine's stages in the backward pass's order, every block's running the first's graph
	// update (one program to compile, whatever the depth; a flat loop compiles none).
	var ordered []string
	like := map[string]string{}
	first := ""
	for at, n := range name {
		if n == "" {
			continue
		}
		ordered = append(ordered, n)
		if at == 0 || at == len(order)-1 {
			continue // the head, the embedding
		}
		if first == "" {
			first = n
		} else if len(sets[n]) == len(sets[first]) {
			like[n] = first
		}
	}
	var err error
	if s.update, err = newHostUpdate(s.t, s.host, sets, ordered, like); err != nil {
		return fmt.Errorf("Config.Offload params: the host update: %w", err)
	}
	s.hostAt = make([]*hostengine.Stage, len(order))
	k := 0
	for at, n := range name {
		if n != "" {
			s.hostAt[at] = s.update.stages[k]
			k++
		}
	}
	return nil
}

// backwardOrder lists the stage instances' sources in the order the backward pass runs them: the
// head, the blocks from the last, the embedding.
func (s *streamExecutor) backwardOrder() [][]*context.Variable {
	order := [][]*context.Variable{s.headVars}
	for i := len(s.blockVars) - 1; i >= 0; i-- {
		order = append(order, s.blockVars[i])
	}
	return append(order, s.embedVars)
}

// instanceName names the stage instance at position at of backwardOrder.
func (s *streamExecutor) instanceName(at int) string {
	switch n := len(s.blockVars); {
	case at == 0:
		return "head"
	case at <= n:
		return fmt.Sprintf("block_%d", n-at)
	}
	return "embed"
}

// hostRun is one step's host update running beside the device: a goroutine fed the step's
// denominator, then each host stage's gradients as the backward pass brings them, then the end.
type hostRun struct {
	update *hostUpdate
	jobs   chan hostJob
	done   chan struct{}
	// The goroutine's results, read after done: whether the step applied, the first error, the
	// time it worked (updates, checks and saves).
	apply bool
	err   error
	busy  time.Duration
	ended bool
	// speculated and undone count the stages updated before the decision and those it undid.
	speculated, undone int
}

// hostJob is what the goroutine does next: begin the step (stage nil, end false), update a stage
// with its gradients, or end the step (end true).
type hostJob struct {
	stage       *hostengine.Stage
	grads       []*tensors.Tensor
	denominator float32
	end         bool
}

// startHostRun starts a step's host update; it saves the host stages' undo records (in the order
// their gradients will come) while no gradient is waiting, when the chain speculates.
func (s *streamExecutor) startHostRun() *hostRun {
	r := &hostRun{update: s.update, jobs: make(chan hostJob, len(s.hostAt)+2), done: make(chan struct{})}
	var unsaved []*hostengine.Stage
	if chain, err := s.t.Chain(); err == nil && (chain.ChecksFinite() || chain.ClipNorm() > 0) {
		unsaved = s.update.stages
	}
	keep := s.t.Config.ClipNorm > 0
	go r.loop(unsaved, keep)
	return r
}

// begin starts the step whose gradient sums divide by denominator.
func (r *hostRun) begin(denominator float32) { r.jobs <- hostJob{denominator: denominator} }

// send hands a host stage its gradients (in its variables' order).
func (r *hostRun) send(stage *hostengine.Stage, grads []*tensors.Tensor) {
	r.jobs <- hostJob{stage: stage, grads: grads}
}

// finish ends the step and waits for the host: it returns whether the step applied.
func (r *hostRun) finish() (bool, error) {
	r.jobs <- hostJob{end: true}
	r.ended = true
	close(r.jobs)
	<-r.done
	return r.apply, r.err
}

// abandon stops a step that failed on the device: the host undoes its speculated updates.
func (r *hostRun) abandon() {
	if !r.ended {
		r.ended = true
		close(r.jobs)
	}
	<-r.done
}

// loop runs the jobs; unsaved are the stages to save while idle, keep says to keep each stage's
// gradients until the end (a clip may undo a speculated update, to do it again with its factor).
func (r *hostRun) loop(unsaved []*hostengine.Stage, keep bool) {
	defer close(r.done)
	var step *hostengine.Step
	var speculated []*hostengine.Stage // updated before the decision, which may undo them
	kept := map[*hostengine.Stage][]*tensors.Tensor{}
	fail := func(err error) {
		if r.err == nil {
			r.err = err
		}
	}
	for {
		job, ok := r.next(&unsaved, fail)
		if !ok { // abandoned: put back what was speculated
			if step != nil {
				fail(step.Finish())
			}
			return
		}
		start := time.Now()
		switch {
		case job.end && r.err == nil:
			r.apply = r.end(step, kept, speculated, fail)
		case job.end && step != nil: // failed before Decide: put back what was speculated
			fail(step.Finish())
		case r.err != nil: // drain
		case job.stage == nil:
			var err error
			step, err = r.update.engine.Begin(job.denominator)
			fail(err)
		default:
			if step.Checks() {
				if err := step.Check(job.stage, job.grads); err != nil {
					fail(err)
					break
				}
			}
			updated, _, err := step.Speculate(job.stage, job.grads)
			fail(err)
			if updated && step.Checks() {
				speculated = append(speculated, job.stage)
			}
			if keep || !updated {
				kept[job.stage] = job.grads
			} else {
				freeAll(job.grads)
			}
		}
		r.busy += time.Since(start)
		if job.end {
			return
		}
	}
}

// next returns the next job, saving an unsaved stage while none is waiting; false when the jobs
// ended without one.
func (r *hostRun) next(unsaved *[]*hostengine.Stage, fail func(error)) (hostJob, bool) {
	for len(*unsaved) > 0 && r.err == nil {
		select {
		case job, ok := <-r.jobs:
			return job, ok
		default:
		}
		start := time.Now()
		fail((*unsaved)[0].Save())
		*unsaved = (*unsaved)[1:]
		r.busy += time.Since(start)
	}
	job, ok := <-r.jobs
	return job, ok
}

// end decides the step (undoing the speculations the decision does not keep), updates the stages
// whose update does not stand with the kept gradients, and finishes the step; it returns whether
// the step applied.
func (r *hostRun) end(step *hostengine.Step, kept map[*hostengine.Stage][]*tensors.Tensor, speculated []*hostengine.Stage, fail func(error)) bool {
	if step == nil {
		fail(fmt.Errorf("the host update: the step ended before it began"))
		return false
	}
	apply, err := step.Decide()
	fail(err)
	r.speculated = len(speculated)
	for _, stage := range speculated {
		if !step.Updated(stage) {
			r.undone++
		}
	}
	for _, stage := range r.update.stages {
		if r.err != nil || !apply || step.Updated(stage) {
			continue
		}
		if kept[stage] == nil {
			fail(fmt.Errorf("the host update: stage %q has no gradients", stage.Variables()[0].ScopeAndName()))
			break
		}
		_, err := step.Update(stage, kept[stage])
		fail(err)
	}
	for _, grads := range kept {
		freeAll(grads)
	}
	fail(step.Finish())
	return apply && r.err == nil
}
