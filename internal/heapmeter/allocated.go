package heapmeter

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
)

// heapAllocs is the bytes the program has allocated on the heap since it started.
const heapAllocs = "/gc/heap/allocs:bytes"

// Allocated returns the bytes fn allocates on the Go heap, counted exactly: it empties the
// buffer pools (two collections), then runs fn with the collector off and GOMAXPROCS=1, so that a
// sync.Pool hands back every buffer put into it (with several processors a buffer put on one may
// not be found from another) and nothing empties it midway. The embedded backend then allocates
// exactly the buffers its pools cannot provide (graph.Memory.AllocatedBytes), plus the executor's
// own bookkeeping (a few KiB per step). Run fn once before counting so that compilation is not
// counted. fn's allocations stay on the heap until the next collection.
//
// It changes process-wide settings while fn runs: do not run it beside other work (parallel
// tests) whose timing matters.
func Allocated(fn func() error) (int64, error) {
	procs := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(procs)
	runtime.GC()
	runtime.GC() // the second collection empties sync.Pools' victim caches
	gc := debug.SetGCPercent(-1)
	defer debug.SetGCPercent(gc)
	before := readUint64(heapAllocs)
	err := fn()
	return int64(readUint64(heapAllocs) - before), err
}

func readUint64(name string) uint64 {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
