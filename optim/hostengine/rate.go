package hostengine

import (
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/onegpu/onegpu/optim"
)

// Bandwidth is the host's memory bandwidth as STREAM measures it, in bytes per second: Copy
// (a[i] = b[i], 8 bytes moved per float32 element) and Triad (a[i] = b[i] + s·c[i], 12 bytes),
// over arrays much larger than the caches, on every core; the best of the repeats.
type Bandwidth struct {
	Copy, Triad float64
	// ArrayBytes is the size of each of the three arrays; Threads the goroutines that shared them.
	ArrayBytes int64
	Threads    int
}

// MeasureBandwidth runs STREAM's copy and triad over three arrays of arrayBytes each (give
// several times the last-level cache: 128 MiB or more for CI's 32 MiB L3), split across
// GOMAXPROCS goroutines, repeats times, and returns the best of each. It allocates 3 × arrayBytes.
func MeasureBandwidth(arrayBytes int64, repeats int) Bandwidth {
	n := int(arrayBytes / 4)
	a, b, c := make([]float32, n), make([]float32, n), make([]float32, n)
	threads := runtime.GOMAXPROCS(0)
	parallel(n, threads, func(lo, hi int) { // touch every page first, on the thread that uses it
		for i := lo; i < hi; i++ {
			a[i], b[i], c[i] = 0, 1, 2
		}
	})
	bw := Bandwidth{ArrayBytes: int64(n) * 4, Threads: threads}
	for range max(repeats, 1) {
		start := time.Now()
		parallel(n, threads, func(lo, hi int) { copy(a[lo:hi], b[lo:hi]) })
		bw.Copy = max(bw.Copy, float64(8*n)/time.Since(start).Seconds())
		start = time.Now()
		parallel(n, threads, func(lo, hi int) {
			triad(a[lo:hi], b[lo:hi], c[lo:hi], 3)
		})
		bw.Triad = max(bw.Triad, float64(12*n)/time.Since(start).Seconds())
	}
	return bw
}

// triad sets x[i] = y[i] + s·z[i], eight elements per iteration without bounds checks (Go does not
// vectorize: a plain loop measures the core, not the memory).
func triad(x, y, z []float32, s float32) {
	n := len(x) &^ 7
	y, z = y[:len(x)], z[:len(x)]
	for i := 0; i < n; i += 8 {
		xs, ys, zs := x[i:i+8:i+8], y[i:i+8:i+8], z[i:i+8:i+8]
		xs[0], xs[1], xs[2], xs[3] = ys[0]+s*zs[0], ys[1]+s*zs[1], ys[2]+s*zs[2], ys[3]+s*zs[3]
		xs[4], xs[5], xs[6], xs[7] = ys[4]+s*zs[4], ys[5]+s*zs[5], ys[6]+s*zs[6], ys[7]+s*zs[7]
	}
	for i := n; i < len(x); i++ {
		x[i] = y[i] + s*z[i]
	}
}

// parallel calls fn on threads contiguous parts of [0, n) at once.
func parallel(n, threads int, fn func(lo, hi int)) {
	var wg sync.WaitGroup
	for t := range threads {
		lo, hi := n*t/threads, n*(t+1)/threads
		wg.Add(1)
		go func() { defer wg.Done(); fn(lo, hi) }()
	}
	wg.Wait()
}

// UpdateRate is an optimizer's measured update rate on the host, next to the bound the host's
// memory bandwidth sets.
type UpdateRate struct {
	// Optimizer describes the optimizer; Path how it updated ("flat loop" or "graph"); Params the
	// parameters of the benchmark's one matrix.
	Optimizer string `json:"optimizer"`
	Path      string `json:"path"`
	Params    int64  `json:"params"`
	// Seconds is the best update's time, ParamsPerSecond Params over it.
	Seconds         float64 `json:"seconds"`
	ParamsPerSecond float64 `json:"params_per_second"`
	// StateBytesPerParam is the optimizer's state per parameter (measured in the context after the
	// first update); BytesPerParam what one update must move at least: the gradient read, the
	// master and the state read and written, the parameter written out in the compute dtype.
	StateBytesPerParam float64 `json:"state_bytes_per_param"`
	BytesPerParam      float64 `json:"bytes_per_param"`
	// BoundParamsPerSecond is the host's bandwidth over BytesPerParam; Fraction the measured rate
	// over it.
	BoundParamsPerSecond float64 `json:"bound_params_per_second"`
	Fraction             float64 `json:"fraction"`
}

// Path names how a stage updates: "flat loop" or "graph".
func (s *Stage) Path() string {
	if s.flat {
		return "flat loop"
	}
	return "graph"
}

// MeasureUpdate times steps updates (after one that compiles and creates the state) of one
// [params/4096, 4096] float32 matrix by an engine of cfg (its Backend, Optimizer, Compute and
// GraphUpdate; a constant learning rate), the gradient already on the host (local, as after its
// transfer from the device; on the backend for a graph update), returning the parameters in
// cfg.Compute; bandwidth is the host's copy bandwidth in bytes per second, for the bound. params is
// rounded down to a multiple of 4096 (at least 4096).
func MeasureUpdate(cfg Config, params int64, steps int, bandwidth float64) (UpdateRate, error) {
	cols := int64(4096)
	rows := max(params/cols, 1)
	n := rows * cols
	ctx := context.New()
	values := make([]float32, n)
	for i := range values {
		values[i] = float32(i%97-48) * 1e-3
	}
	w := ctx.InAbsPath("/bench").VariableWithValue("w", tensors.FromFlatDataAndDimensions(values, int(rows), int(cols)))
	cfg.Ctx, cfg.Schedule = ctx, optim.Constant(1e-3)
	engine, err := New(cfg)
	if err != nil {
		return UpdateRate{}, err
	}
	defer engine.Close()
	stage, err := engine.Stage("bench", []*context.Variable{w})
	if err != nil {
		return UpdateRate{}, err
	}
	for i := range values {
		values[i] = float32(i%89-44) * 1e-4
	}
	grad := tensors.FromFlatDataAndDimensions(values, int(rows), int(cols))
	if !stage.Flat() {
		if grad, err = grad.OnDeviceClone(cfg.Backend, 0); err != nil {
			return UpdateRate{}, fmt.Errorf("placing the gradient on the host backend: %w", err)
		}
	}
	defer grad.FinalizeAll()
	r := UpdateRate{Optimizer: engine.optimizer.(fmt.Stringer).String(), Path: stage.Path(), Params: n}
	for step := range max(steps, 1) + 1 {
		start := time.Now()
		outs, err := stage.Update([]*tensors.Tensor{grad}, Scaling{})
		if err != nil {
			return r, err
		}
		if err := engine.Commit(); err != nil {
			return r, err
		}
		// Reading the global step (an output of the update, a scalar) waits for the update.
		if _, err := optimizers.GetGlobalStepVar(ctx).MustValue().Value().(int64); !err {
			return r, fmt.Errorf("the global step is not an int64 scalar")
		}
		elapsed := time.Since(start).Seconds()
		for _, o := range outs {
			o.FinalizeAll()
		}
		if step > 0 && (r.Seconds == 0 || elapsed < r.Seconds) {
			r.Seconds = elapsed
		}
	}
	var state int64
	for v := range ctx.IterVariables() {
		if v != w && !isStepWide(v) {
			state += int64(v.Shape().Memory())
		}
	}
	r.ParamsPerSecond = float64(n) / r.Seconds
	r.StateBytesPerParam = float64(state) / float64(n)
	computeBytes := 4.0
	if cfg.NoParams {
		computeBytes = 0
	} else if cfg.Compute != dtypes.InvalidDType {
		computeBytes = float64(cfg.Compute.Size())
	}
	r.BytesPerParam = 4 + 2*4 + 2*r.StateBytesPerParam + computeBytes
	return r.WithBandwidth(bandwidth), nil
}

// WithBandwidth is r with its bound and fraction for the host bandwidth bandwidth (bytes per second).
func (r UpdateRate) WithBandwidth(bandwidth float64) UpdateRate {
	r.BoundParamsPerSecond = bandwidth / r.BytesPerParam
	r.Fraction = r.ParamsPerSecond / r.BoundParamsPerSecond
	return r
}
