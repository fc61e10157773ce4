// Package heapmeter measures what a function does to the Go heap, where the embedded backend
// allocates a step's buffers:
//
//   - MeasurePeak samples the heap's peak while fn runs (GOGC=10, collecting continuously). It
//     approximates a step's peak memory (graph.Memory.PeakTempBytes) but depends on the collector
//     keeping up: on a loaded machine it reads high. `onegpu bench` and the benchmarks report it.
//   - Allocated counts the bytes fn allocates with the collector off and one processor, so that
//     the embedded backend's buffer pools behave the same in every run: the count is
//     deterministic and matches graph.Memory.AllocatedBytes, the simulation's count. Tests assert
//     on it.
//
// Example:
//
//	h, err := heapmeter.MeasurePeak(func() error { _, err := exec.Exec(x); return err })
//	fmt.Println(h.AboveBaseline())
package heapmeter
