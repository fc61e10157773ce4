// Package train runs the tutorial's training: one step combines a precision policy, remat,
// micro-batch gradient accumulation, Adam with the tutorial's warm-up/exponential-decay schedule
// and an optional loss scale; the loop shows progress, keeps GoMLX checkpoints and resumes
// bit-exactly.
//
//	trainer, err := train.New(backend, train.Config{Model: "gpt", GPT: tiny, Batch: 16, MicroBatches: 4,
//		Policy: policy, Remat: remat.Spec{MLP: true, Attention: true}, Schedule: train.TutorialSchedule})
//	data, err := train.NewText(train.Corpus, 16, tiny.SeqLen, 1)
//	history, err := trainer.Run(data, train.RunOptions{Steps: 60, Progress: os.Stdout})
//
// Trainer.Program builds the same step for graph.Analyze or graph.CompileProgram without running it.
package train
