// Package train runs training for any model: one step combines a precision policy, remat,
// micro-batch gradient accumulation and a gradient chain (optim: loss scale with an atomic skip of
// non-finite steps, Adam with the tutorial's warm-up/exponential-decay schedule); the loop shows
// progress, keeps crash-safe checkpoints (package checkpoint: GoMLX's format, staged, synced and
// renamed into place) and resumes bit-exactly. An executor runs the step: on one device, on
// several (Config.Devices), or with the optimizer's state and update on the host (Config.Offload).
//
// The tutorial's models are two implementations of Model (GPT, Classifier) that New builds from a
// Config:
//
//	trainer, err := train.New(backend, train.Config{Model: "gpt", GPT: tiny, Batch: 16, MicroBatches: 4,
//		Policy: policy, Remat: remat.Spec{MLP: true, Attention: true}, Schedule: train.TutorialSchedule})
//	batches, err := data.NewText(data.Corpus, 16, tiny.SeqLen, 1)
//	history, err := trainer.Run(batches, train.RunOptions{Steps: 60, Progress: os.Stdout})
//
// A model of your own implements Model (input shapes, a loss as sums and counts, metric names),
// builds itself from onegpu's layers (which follow the policy NewFor sets on the context) and marks
// its blocks with remat.Block; NewFor trains it with the same loop (examples/ownmodel):
//
//	trainer, err := train.NewFor(backend, ResMLP{...}, train.Config{Batch: 64, MicroBatches: 4,
//		Policy: bf16Compute, RematBlocks: []string{"block"}, LossScale: "dynamic", Schedule: schedule})
//
// Trainer.Program builds the same step for graph.Analyze or graph.CompileProgram without running it
// (each call builds a new program, so one can be analyzed and another compiled).
package train
