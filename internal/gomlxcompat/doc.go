// Package gomlxcompat holds every hook onegpu has into the internals of GoMLX v0.26.0 and go-xla
// v0.1.4: values those versions keep in unexported fields (a compiled graph's PJRT executable, an
// op's static parameters, the StableHLO function a graph is being built into) and the internal
// conventions onegpu relies on (the order of context.Exec's outputs, simplego's matmul blocks).
//
// Each hook states the assumption it rests on and returns an error when the assumption fails,
// and each has one test that checks it against the real library, so that upgrading GoMLX breaks
// this package, loudly, instead of silently changing onegpu's numbers or memory.
//
// Example: declare that output 0 of a graph being built on XLA overwrites its parameter 2.
//
//	err := gomlxcompat.AliasOutputs(g, []gomlxcompat.Alias{{Parameter: 2, Output: 0}})
package gomlxcompat
