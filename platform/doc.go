// Package platform chooses and opens the backend a program runs on: GoMLX's embedded pure-Go
// backend, run one op at a time in creation order ("go:ops_sequential": its parallel executor
// deadlocks on transformer-sized graphs on small machines and keeps more activations alive;
// "go:parallelism=8" trades memory for speed), or XLA through a PJRT plugin named by absolute path
// ("xla:/abs/path/plugin.so"; onegpu never downloads one, and XLA is in cgo builds only).
//
//	backend, err := platform.NewBackend("")  // "go" unless $GOMLX_BACKEND or $ONEGPU_PJRT_PLUGIN say otherwise
//	spec, err := platform.ResolveBackend("") // the same choice, without creating the backend
//
// On the embedded backend it refuses float16 before the backend can crash on it and rounds
// float32-to-bfloat16 conversions and bfloat16 matrix products to nearest even, as XLA does
// (GoMLX v0.26.0 truncates). AliasUpdatedState declares a step's updated variables as
// input/output aliases on XLA, as JAX's donation does. Importing this package installs onegpu's
// gradient rules (package vjp).
package platform
