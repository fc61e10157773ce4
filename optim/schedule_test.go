package optim_test

import (
	"math"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/optim"
)

// tutorial is the tutorial's learning rate: from 0 to 4e-4 over 10 updates, then ×0.99 per update.
var tutorial = optim.WarmupExponentialDecay(0, 4e-4, 10, 1, 0.99)

// scheduleRates returns the learning rate GoMLX's optimizers read after ApplySchedule, at each of
// steps (the global step set before each run).
func scheduleRates(t *testing.T, s optim.Schedule, steps []int) []float64 {
	t.Helper()
	return scheduleRatesOn(t, testkit.Embedded(), s, steps)
}

// scheduleRatesOn is scheduleRates on a backend.
func scheduleRatesOn(t *testing.T, backend backends.Backend, s optim.Schedule, steps []int) []float64 {
	t.Helper()
	ctx := context.New()
	exec, err := context.NewExec(backend, ctx, func(ctx *context.Context, g *graph.Graph) *graph.Node {
		optim.ApplySchedule(ctx, g, s)
		return optimizers.LearningRateVar(ctx, dtypes.Float32, 0).ValueGraph(g)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Finalize()
	rates := make([]float64, len(steps))
	for i, step := range steps {
		optimizers.GetGlobalStepVar(ctx).SetValue(tensors.FromValue(int64(step)))
		out, err := exec.Exec()
		if err != nil {
			t.Fatal(err)
		}
		rates[i] = float64(out[0].Value().(float32))
	}
	return rates
}

// TestWarmupExponentialDecayMatchesOptax checks At against optax's
// warmup_exponential_decay_schedule written out by hand, and Rate, as the optimizer reads it,
// against At.
func TestWarmupExponentialDecayMatchesOptax(t *testing.T) {
	for step, want := range map[int]float64{0: 0, 5: 2e-4, 10: 4e-4, 11: 4e-4 * 0.99, 30: 4e-4 * math.Pow(0.99, 20)} {
		if got := tutorial.At(step); math.Abs(got-want) > 1e-15 {
			t.Errorf("At(%d) = %g, want %g", step, got, want)
		}
	}
	// The graph computes in float32, as optax does: its decay rate is 0.99 rounded to float32, an
	// error that grows with the exponent (4.7e-6 relative after 500 updates). Against the float64
	// reference of the same rounded constants it agrees to a few float32 roundings, over the
	// warm-up and far into the decay.
	rounded := tutorial
	rounded.Init, rounded.Peak = float64(float32(tutorial.Init)), float64(float32(tutorial.Peak))
	rounded.DecayRate = float64(float32(tutorial.DecayRate))
	steps := []int{0, 1, 2, 5, 9, 10, 11, 14, 500, 3000}
	for i, got := range scheduleRates(t, tutorial, steps) {
		if want := rounded.At(steps[i]); math.Abs(got-want) > 4e-7*want {
			t.Errorf("update %d: learning rate %g, want %g (relative error %.2g)", steps[i], got, want, math.Abs(got-want)/want)
		}
	}
}

// TestWarmupCosineMatchesOptax checks At against optax's warmup_cosine_decay_schedule written out
// by hand (the warm-up, the cosine's midpoint, the end and after it), and Rate against At.
func TestWarmupCosineMatchesOptax(t *testing.T) {
	s := optim.WarmupCosine(1e-5, 1e-3, 10, 110, 1e-4)
	for step, want := range map[int]float64{0: 1e-5, 5: 1e-5 + 0.5*(1e-3-1e-5), 10: 1e-3, 60: 1e-4 + 0.5*(1e-3-1e-4), 110: 1e-4, 500: 1e-4} {
		if got := s.At(step); math.Abs(got-want) > 1e-15 {
			t.Errorf("At(%d) = %g, want %g", step, got, want)
		}
	}
	steps := []int{0, 3, 9, 10, 11, 35, 60, 100, 109, 110, 1000}
	for i, got := range scheduleRates(t, s, steps) {
		// Within float32 roundings of the peak: the warm-up's first rate is a difference of two
		// float32 values close to the peak, as in optax.
		if want := s.At(steps[i]); math.Abs(got-want) > 1e-6*s.Peak {
			t.Errorf("update %d: learning rate %g, want %g", steps[i], got, want)
		}
	}
}

// TestSchedulesSameBitsOnEveryBackend: the warm-up-exponential-decay schedule (the tutorial's, and
// with a transition of 3 updates) sets the same float32 rate on the embedded backend and on XLA
// at every one of its first 3000 updates: the optimizer offload computes it on the former for a
// device on the latter. (With the backends' Pow and XLA's fused multiply-adds, 13% of the
// tutorial's rates differed in the last bit.)
func TestSchedulesSameBitsOnEveryBackend(t *testing.T) {
	xla := testkit.RequireXLA(t)
	steps := make([]int, 3000)
	for i := range steps {
		steps[i] = i
	}
	for _, s := range []optim.Schedule{tutorial, optim.WarmupExponentialDecay(1e-5, 3e-3, 7, 3, 0.999)} {
		want, got := scheduleRatesOn(t, testkit.Embedded(), s, steps), scheduleRatesOn(t, xla, s, steps)
		for i := range steps {
			if got[i] != want[i] {
				t.Fatalf("%s, update %d: rate %.9g on XLA, %.9g on the embedded backend", s, i, got[i], want[i])
			}
		}
	}
}

// TestConstantIsOneCall: a constant rate is the rate at every step, in the graph exactly its
// float32 rounding.
func TestConstantIsOneCall(t *testing.T) {
	s := optim.Constant(3e-3)
	for i, got := range scheduleRates(t, s, []int{0, 1, 1000}) {
		if got != float64(float32(3e-3)) || s.At(i) != 3e-3 {
			t.Errorf("step %d: rate %g, want 3e-3", i, got)
		}
	}
}

// TestSchedulesRefuseWhatCannotWork: every schedule's Validate names the bad value; a nil schedule
// is an error that says what to use.
func TestSchedulesRefuseWhatCannotWork(t *testing.T) {
	for _, s := range []optim.Schedule{
		optim.Constant(0), optim.Constant(math.NaN()), optim.Constant(math.Inf(1)),
		optim.WarmupExponentialDecay(0, math.NaN(), 10, 1, 0.99), optim.WarmupExponentialDecay(0, 1e-3, -1, 1, 0.99),
		optim.WarmupExponentialDecay(0, 1e-3, 1, 0, 0.99), optim.WarmupExponentialDecay(0, 1e-3, 1, 1, 1.5),
		optim.WarmupCosine(0, 1e-3, 10, 10, 0), optim.WarmupCosine(-1, 1e-3, 10, 20, 0),
	} {
		if err := optim.ValidateSchedule(s); err == nil {
			t.Errorf("%s: no error", s)
		}
	}
	if err := optim.ValidateSchedule(nil); err == nil {
		t.Error("a nil schedule: no error")
	}
	if err := optim.ValidateSchedule(tutorial); err != nil {
		t.Errorf("the tutorial's schedule: %v", err)
	}
}
