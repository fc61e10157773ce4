// Package hostengine runs a run's optimizer update in host memory, on the fastest host backend
// (an XLA CPU client when a CPU PJRT plugin is there, else the embedded backend), one set of
// variables at a time: the streamed executor (--offload params) keeps the float32 master
// weights and the optimizer's state on the host and updates each block's as soon as its gradients
// arrive. The state lives in the host backend's buffers, donated to each update and written in
// place; gradients come in, the parameters go out in the compute dtype. The update is the project's
// optimizer code (optim.Adam, optim.Adam8bit, optim.Adafactor, or any optim.GradientsOptimizer)
// under the same variable names as an update on the device, so checkpoints are the same.
//
//	backend, _, err := hostengine.NewBackend()
//	engine, err := hostengine.New(hostengine.Config{Backend: backend, Ctx: ctx,
//		Optimizer: optim.Adam().Done(), Schedule: optim.Constant(1e-3), Compute: dtypes.BFloat16})
//	block0, err := engine.Stage("block_0", block0Vars)
//	params, err := block0.Update(grads, hostengine.Scaling{}) // one call per stage per step
//	err = engine.Commit()                                      // once per step, after the stages
//
// BenchmarkBandwidth and BenchmarkUpdate (and `onegpu bench --grid host`) measure the host's memory
// bandwidth and the parameters each optimizer updates per second next to the bound it sets.
package hostengine
