// Package hostengine runs a run's optimizer update in host memory, one set of variables at a time:
// the one host update of both offload modes (the optimizer offload keeps the optimizer's state on
// the host; the streamed executor, --offload params, the float32 master weights too). Where the
// optimizer has a flat loop (Adam, AdamW, 8-bit Adam: optim.FlatOptimizer) a stage updates in Go
// memory, one pass over the masters, gradients and state on every core, the same values as the
// graph update on the embedded backend bit for bit; any other optimizer runs its graph update on the
// fastest host backend (an XLA CPU client when a CPU PJRT plugin is there, else the embedded
// backend), its state in that backend's buffers, donated and written in place. The update is the
// project's optimizer code under the same variable names as an update on the device, so
// checkpoints are the same.
//
//	backend, _, err := hostengine.NewBackend()
//	engine, err := hostengine.New(hostengine.Config{Backend: backend, Ctx: ctx,
//		Optimizer: optim.Adam().Done(), Schedule: optim.Constant(1e-3), Compute: dtypes.BFloat16})
//	block0, err := engine.Stage("block_0", block0Vars)
//	params, err := block0.Update(grads, hostengine.Scaling{}) // one call per stage per step
//	err = engine.Commit()                                      // once per step, after the stages
//
// With the run's chain (Config.Chain: a loss scale, a global-norm clip), Begin's Step runs the
// chain's step-wide part across the stages: Check each stage's gradients, Decide, Update, Finish.
//
// The same engine updates on the device where the variables live (Config.OnDevice: train's staged
// step), the gradients' partial results computed there; blocks with the same variables share one
// compiled update (StageLike: each binds its variables and state in the first block's place).
//
// BenchmarkBandwidth and BenchmarkUpdate (and `onegpu bench --grid host`) measure the host's memory
// bandwidth and the parameters each optimizer updates per second next to the bound it sets.
package hostengine
