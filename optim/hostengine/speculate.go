package hostengine

import (
	"fmt"
	"reflect"
	"runtime"
	"sync"

	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// A speculated step (SuperOffload's speculation and validation, exact): a host that receives a
// model's gradients a stage at a time (the streamed executor's backward pass) updates each stage as
// soon as its gradients are there, before the step-wide part knows whether the step applies (a loss
// scale skips a step whose gradients are not finite, anywhere) and by which factor the global-norm
// clip scales it. Each stage's update assumes the step applies unclipped (Speculate), after saving
// what the update overwrites, its masters and optimizer state, in the stage's undo record (Save).
// Decide then puts back every speculated stage the decision does not keep: all of them in a skipped
// step, all of them when the clip is active (factor below 1), to be updated again with the factor.
// A stage's update does not depend on the other stages' (the step-wide scalars are held until
// Commit), so a kept speculation is the update the serialized step computes, bit for bit, and an
// undone one leaves the stage as it was, bit for bit.

// Save copies the stage's masters and optimizer state (what its update overwrites) into its undo
// record, allocated on the first Save and kept: the record holds StateBytes bytes. Speculate saves a
// stage that was not saved since its last update; a caller with idle cores saves ahead (the
// streamed executor while the device runs the forward pass).
func (s *Stage) Save() error {
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	return s.save()
}

func (s *Stage) save() error {
	if s.saved {
		return nil
	}
	if s.undo == nil {
		s.undo = make([]any, len(s.mutable))
	}
	for i, v := range s.mutable {
		value, err := v.Value()
		if err != nil {
			return fmt.Errorf("hostengine: saving stage %q: %w", s.name, err)
		}
		err = value.ConstFlatData(func(flat any) {
			if s.undo[i] == nil {
				s.undo[i] = reflect.MakeSlice(reflect.TypeOf(flat), reflect.ValueOf(flat).Len(), reflect.ValueOf(flat).Len()).Interface()
			}
			copyFlat(s.undo[i], flat)
		})
		if err != nil {
			return fmt.Errorf("hostengine: saving %s: %w", v.ScopeAndName(), err)
		}
	}
	s.saved = true
	return nil
}

// restore puts the undo record back into the stage's masters and optimizer state.
func (s *Stage) restore() error {
	if !s.saved {
		return fmt.Errorf("hostengine: stage %q has no undo record to restore", s.name)
	}
	for i, v := range s.mutable {
		value, err := v.Value()
		if err != nil {
			return err
		}
		if err := value.MutableFlatData(func(flat any) { copyFlat(flat, s.undo[i]) }); err != nil {
			return fmt.Errorf("hostengine: restoring %s: %w", v.ScopeAndName(), err)
		}
	}
	return nil
}

// StateBytes are the bytes of what the stage's update overwrites: its masters and optimizer state
// (the size of its undo record once saved).
func (s *Stage) StateBytes() int64 {
	var n int64
	for _, v := range s.mutable {
		n += int64(v.Shape().Memory())
	}
	return n
}

// Speculate updates stage s before Decide as Update will if the step applies unclipped, saving
// the stage first (Save) unless it was saved since its last update, and returns the new
// parameters as Update does. A chain without a loss scale and a clip (Checks false) applies every
// step unclipped: its speculations always stand, and nothing is saved. It updates nothing and returns false when the step's partial results
// so far already say the speculation would be undone: a gradient that is not finite under a loss
// scale, or squares beyond the clip's norm. With Checks, call Check(s, grads) first.
func (st *Step) Speculate(s *Stage, grads []*tensors.Tensor) (bool, []*tensors.Tensor, error) {
	chain := st.e.cfg.Chain
	switch {
	case st.decided:
		return false, nil, fmt.Errorf("hostengine: stage %q speculated after Decide: use Update", s.name)
	case st.Checks() && !st.checked[s]:
		return false, nil, fmt.Errorf("hostengine: stage %q speculated without its Check", s.name)
	case st.updated[s]:
		return false, nil, fmt.Errorf("hostengine: stage %q updated twice in a step", s.name)
	}
	if (chain.ChecksFinite() && !st.finite) || st.beyondClip() {
		return false, nil, nil
	}
	if st.Checks() { // else nothing can undo it
		st.e.mu.Lock()
		err := s.save()
		st.e.mu.Unlock()
		if err != nil {
			return false, nil, err
		}
	}
	params, err := s.Update(grads, st.scaling())
	if err != nil {
		return false, nil, err
	}
	st.updated[s], st.speculated[s] = true, true
	return true, params, nil
}

// Updated reports whether stage s's update this step stands: updated (speculated or after
// Decide) and not undone by Decide.
func (st *Step) Updated(s *Stage) bool { return st.updated[s] }

// beyondClip reports whether the squares checked so far exceed the clip's: its factor will be
// below 1.
func (st *Step) beyondClip() bool {
	maxNorm := st.e.cfg.Chain.ClipNorm()
	if maxNorm <= 0 {
		return false
	}
	var squares float64
	for _, x := range st.squares {
		squares += float64(x)
	}
	return squares > maxNorm*maxNorm
}

// undo puts back every speculated stage whose update the decision does not keep: every one when
// the step is skipped or the clip factor is not 1. The caller holds the engine's lock.
func (st *Step) undo() error {
	if st.apply && st.clip == 1 {
		return nil
	}
	for s := range st.speculated {
		if err := s.restore(); err != nil {
			return err
		}
		delete(st.updated, s)
		delete(st.speculated, s)
	}
	return nil
}

// copyFlat copies src into dst, flat slices of one type and length, the cores sharing the work.
func copyFlat(dst, src any) {
	d, s := reflect.ValueOf(dst), reflect.ValueOf(src)
	n := s.Len()
	const least = 1 << 16 // elements a goroutine is worth
	parts := max(1, min(runtime.GOMAXPROCS(0), n/least))
	if parts == 1 {
		reflect.Copy(d, s)
		return
	}
	var wg sync.WaitGroup
	for i := range parts {
		lo, hi := i*n/parts, (i+1)*n/parts
		wg.Go(func() { reflect.Copy(d.Slice(lo, hi), s.Slice(lo, hi)) })
	}
	wg.Wait()
}
