// Package train runs training for any model: one step combines a precision policy, remat,
// micro-batch gradient accumulation and a gradient chain (optim: loss scale with an atomic skip of
// non-finite steps, clipping, the optimizer, the learning-rate schedule); the loop shows
// progress, keeps crash-safe checkpoints (package checkpoint: GoMLX's format, staged, synced and
// renamed into place) and resumes bit-exactly.
//
// A run is described once, typed (Config): the model (a Model: models.GPT, models.Classifier or
// your own), the batch and its micro-batches, the policy, what is rematerialized, the optimizer, the
// loss scale, the schedule, clipping, where the optimizer's state lives, the devices and the seed.
// Strings are read into it at the edges only (the CLI's flags, recipes.Defaults):
//
//	trainer, err := train.New(backend, train.Config{Model: models.GPT{Config: tiny}, Batch: 16, MicroBatches: 4,
//		Policy: bf16, Remat: train.Remat{Kinds: []string{"mlp", "attn"}}, Schedule: recipes.TutorialSchedule(3e-3)})
//	batches, err := data.NewText(data.Corpus, 16, tiny.SeqLen, 1)
//	history, err := trainer.Run(batches, train.RunOptions{Steps: 60, Progress: os.Stdout})
//
// A model of your own implements Model (input shapes, a loss as sums and counts, metric names),
// builds itself from onegpu's layers (which follow the policy the trainer sets on the context) and
// marks its blocks with remat.Block; the same loop trains it (examples/ownmodel):
//
//	trainer, err := train.New(backend, train.Config{Model: ResMLP{...}, Batch: 64, MicroBatches: 4,
//		Policy: bf16, Remat: train.Remat{Kinds: []string{"block"}}, LossScale: mixed.NewDynamicLossScale(),
//		Optimizer: optim.AdamW().WeightDecay(0.01).Done(), ClipNorm: 1, Schedule: optim.Constant(3e-3)})
//
// An executor runs the step: on one device, on several (Config.Devices), or with the optimizer's
// state and update on the host (Config.Offload), one file each behind one small interface.
// Trainer.Program builds the same step for analysis.Analyze or analysis.CompileProgram without running it
// (each call builds a new program, so one can be analyzed and another compiled).
package train
