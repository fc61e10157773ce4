// Package graph chooses onegpu's backends and makes GoMLX graphs trustworthy to train with: it
// installs gradient rules that are fast and exact in 16 bits, estimates a step's peak memory and
// FLOPs before running it, and audits a graph's dtypes.
//
// Import GoMLX's graph package as graph and this one as ograph:
//
//	backend, err := ograph.NewBackend("")  // "go" (embedded, sequential) unless $GOMLX_BACKEND or $ONEGPU_PJRT_PLUGIN say otherwise
//	p, err := ograph.ContextProgram(backend, ctx, "train_step", inputShapes, step)
//	m := ograph.Analyze(p)                 // m.PeakBytes, m.Breakdown[ograph.Activations], m.FLOPs
//	findings := ograph.Audit(p.Graph, p.Outputs)
//
// Backends: "go" is GoMLX's embedded pure-Go backend run one op at a time in creation order
// ("go:ops_sequential"), because its parallel executor deadlocks on transformer-sized graphs on
// small machines and keeps more activations alive; "go:parallelism=8" trades memory for speed.
// "xla:/abs/path/plugin.so" runs XLA through a PJRT plugin; onegpu never downloads one.
//
// Gradients: GoMLX v0.26.0 builds matmul gradients as broadcast-multiply-and-sum (tens of times
// slower and 16-40% wrong in bfloat16), sums broadcast gradients in 16 bits, and has no rule for
// Rsqrt or a Slice the embedded backend can run. Importing this package replaces those rules
// (InstallGradients, at package initialization), for graphs on any backend, one GoMLX created
// included; UseStockGradients restores GoMLX's for one graph, for comparison.
package graph
