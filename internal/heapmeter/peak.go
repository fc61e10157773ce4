package heapmeter

import (
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/onegpu/onegpu/internal/filelock"
)

// heapObjects is the Go heap's live and not-yet-swept objects: what the embedded backend's buffers
// occupy, including freed buffers waiting in its pools until a collection.
const heapObjects = "/memory/classes/heap/objects:bytes"

// GCPercent is the GOGC setting MeasurePeak runs under. Go's default (100) lets dead
// buffers pile up to twice the live heap before a collection, which hides what a technique saves;
// at 10 the heap stays within about 10% of what is live.
const GCPercent = 10

// Peak is a heap measurement of one call.
type Peak struct {
	// Baseline is the heap after two collections, before the call: what the caller already
	// holds (weights, optimizer state, the batch).
	Baseline uint64
	// Peak is the highest heap size sampled during the call.
	Peak uint64
	// Samples is the number of samples taken.
	Samples int
}

// AboveBaseline is what the call allocated at its peak on top of what existed before it.
func (h Peak) AboveBaseline() int64 { return int64(h.Peak) - int64(h.Baseline) }

// MeasurePeak runs fn with the garbage collector at GCPercent, collecting continuously,
// and samples the heap's object bytes every 100µs (runtime/metrics; no stop-the-world). It
// approximates the peak memory of a step on the embedded backend, which allocates its buffers on
// the Go heap; compare it with Memory.PeakTempBytes. fn runs slower while measured. Run fn once
// before measuring so that compilation is not measured. Steps of a few MiB read high: the
// collector cannot keep up with buffers freed microseconds before the peak.
func MeasurePeak(fn func() error) (Peak, error) {
	// Measurements in other processes (go test runs packages in parallel) would slow the collector
	// and make this one read high: take turns.
	if unlock, err := lockMeasurements(); err == nil {
		defer unlock()
	}
	previous := debug.SetGCPercent(GCPercent)
	defer debug.SetGCPercent(previous)
	runtime.GC()
	runtime.GC() // the second collection empties sync.Pools' victim caches
	h := Peak{Baseline: readHeapObjects()}
	h.Peak = h.Baseline

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	wg.Add(1)
	go func() {
		defer wg.Done()
		ticker := time.NewTicker(100 * time.Microsecond)
		defer ticker.Stop()
		for {
			v := readHeapObjects()
			mu.Lock()
			h.Peak = max(h.Peak, v)
			h.Samples++
			mu.Unlock()
			select {
			case <-stop:
				return
			case <-ticker.C:
			}
		}
	}()
	// Collect back to back while fn runs: the embedded backend keeps freed buffers in per-size
	// pools until a collection, and those, more than dead objects, inflate a sampled heap. Without
	// this a step's peak reads 10-20% high; with it, within 1-3% of the simulation on steps of
	// 30-80 MiB.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				runtime.GC()
			}
		}
	}()
	err := fn()
	close(stop)
	wg.Wait()
	h.Peak = max(h.Peak, readHeapObjects())
	return h, err
}

func readHeapObjects() uint64 {
	s := []metrics.Sample{{Name: heapObjects}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// lockMeasurements takes a machine-wide lock (a file lock in the temporary folder) so that heap
// measurements of several processes do not overlap (where the system has file locks; see
// internal/filelock).
func lockMeasurements() (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "onegpu-heap-measurement.lock"), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, err
	}
	if err := filelock.Lock(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		filelock.Unlock(f)
		f.Close()
	}, nil
}
