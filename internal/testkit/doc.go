// Package testkit is what onegpu's tests share: the backends they run on (the embedded backend
// always, XLA when $ONEGPU_PJRT_PLUGIN names a PJRT plugin, as CI does), running a graph function
// with float64 results, bit-exact and relative comparisons, catching a builder's panic, the
// census of the program XLA compiled, and PlainCheck (a layer or model against a plain float64
// implementation and central differences).
//
// It sits above platform and analysis (it creates backends with platform.NewBackend) and below
// everything else: their own tests use it from their external test packages; the GoMLX
// compatibility layer below them (internal/gomlxcompat) tests itself without it. Its own tests check the repository as CI's `go test ./...` sees it:
// no executable over 1 MiB is tracked (a build output committed by mistake).
//
//	got := testkit.Run(t, testkit.Embedded(), fn, x)[0]
//	if e := testkit.RelL2(got, want); e > 1e-6 { t.Errorf(...) }
package testkit
