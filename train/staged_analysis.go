package train

import (
	"fmt"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/optim/hostengine"
)

// StagedPrograms are the device programs of a staged step (Config.Offload OffloadStaged), built
// for analysis: the stage programs (StreamedPrograms: the same builder, the same graphs) and the
// optimizer's update of each kind of stage as the staged step runs it on the device (the host
// engine's graph update, hostengine.Engine.UpdateProgram; a block's serves every block), in one
// context. Like the stage programs they do not grow with the number of blocks. Finalize releases
// them.
type StagedPrograms struct {
	*StreamedPrograms
	// Updates are the update programs of the embedding, a block and the head, those that train
	// something (the head's without the variables the embedding updates: a tied table).
	Updates []*analysis.Program
}

// All lists the stage programs, then the update programs.
func (p *StagedPrograms) All() []*analysis.Program {
	return append(p.StreamedPrograms.All(), p.Updates...)
}

// Finalize releases every program's graph.
func (p *StagedPrograms) Finalize() {
	for _, u := range p.Updates {
		u.Graph.Finalize()
	}
	p.StreamedPrograms.Finalize()
}

// StagedPrograms builds the staged step's device programs for analysis on the trainer's backend
// at the run's micro-batch size. Nothing runs and the trainer's state is untouched.
func (t *Trainer) StagedPrograms() (*StagedPrograms, error) {
	stages, err := t.StreamedPrograms()
	if err != nil {
		return nil, err
	}
	out := &StagedPrograms{StreamedPrograms: stages}
	fail := func(err error) (*StagedPrograms, error) {
		out.Finalize()
		return nil, fmt.Errorf("staged programs: %w", err)
	}
	chain, err := t.Chain()
	if err != nil {
		return fail(err)
	}
	engine, err := hostengine.New(hostengine.Config{Backend: t.Backend, Ctx: stages.Ctx, Chain: chain, Schedule: t.Config.Schedule, NoParams: true, OnDevice: true})
	if err != nil {
		return fail(err)
	}
	defer engine.Close()
	for _, st := range stages.Stages {
		vars := st.Trainable
		if st.Name == "head" {
			vars, _ = headUpdates(stages.Stages[0].Trainable, vars)
		}
		if len(vars) == 0 {
			continue
		}
		p, err := engine.UpdateProgram(st.Name, vars)
		if err != nil {
			return fail(err)
		}
		out.Updates = append(out.Updates, p)
	}
	return out, nil
}
