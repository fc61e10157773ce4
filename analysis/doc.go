// Package analysis builds a training step's program without running it and says what it costs:
// its peak memory on a sequential execution and what is alive at the peak, by kind (Analyze),
// its FLOPs, the sections a model marks (Section), and, on XLA, the compiled program's memory
// statistics (CompiledMemory) and the census of its optimized HLO (HLOCensus). VariableRole is the
// one classification of a training context's variables (trainable weights, frozen weights,
// optimizer state, other) that the analysis, the optimizer, sharding and checkpoints share.
//
//	p, err := analysis.ContextProgram(backend, ctx, "train_step", inputShapes, step)
//	m := analysis.Analyze(p) // m.PeakBytes, m.Breakdown[analysis.Activations], m.FLOPs
//	fmt.Println(analysis.FormatBytes(m.PeakBytes))
//
// Programs are built with onegpu's gradient rules (importing this package installs them: package
// vjp), so the estimate is of the program onegpu runs.
package analysis
