package train

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/ml/context"
)

// SetWeights starts the run from weights of one's own instead of the seed's: load fills the
// context the step reads and updates (e.g. hf.Open of a published checkpoint into it, which creates
// the model's variables under their names), and the first step finds them there, creating only
// what load left out (the optimizer's state). It must come before the first step, of a run that
// starts at step 0: a run that resumes from a checkpoint takes its weights from the checkpoint.
//
// Under LoRA it gives the frozen base (and may give adapters: hf.LoadAdapter), also to a run that
// resumes: its checkpoints hold the adapters and record the base's SHA-256, not the base. The base
// is made from what SetWeights gave when the run starts (Initialize, Run or the first Step: hashed,
// then quantized for QLoRA), from the seed when it gave no weight of the model; set BaseSource to
// say where it came from.
func (t *Trainer) SetWeights(load func(ctx *context.Context) error) error {
	if t.started {
		return fmt.Errorf("set weights: the trainer has already run a step")
	}
	if t.base != nil {
		return fmt.Errorf("set weights: the LoRA run's base was made already (by Initialize or Run, from %s): set the weights before", t.base.from)
	}
	if err := load(t.Ctx); err != nil {
		return err
	}
	// The step's graph finds the variables instead of creating them, as after Initialize.
	t.Ctx = t.Ctx.Checked(false)
	return nil
}
