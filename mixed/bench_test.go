package mixed_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/internal/heapmeter"
	"github.com/onegpu/onegpu/internal/tutorialmlp"
	"github.com/onegpu/onegpu/mixed"
)

// The benchmarks compare the tutorial MLP's train step (batch 512, Adam wrapped with a dynamic
// loss scale) in float32 and with float32 parameters and bfloat16 compute, on the embedded backend
// in sequential mode:
//
//	go test ./mixed/ -run '^$' -bench MLPStep -benchtime 20x
//
// Three variants (benchVariants): the model as internal/tutorialmlp writes it (its LayerNorm keeps
// a float32 copy of the hidden activation for the backward pass); the same model written with this
// package's islands (Normalize, SoftmaxCrossEntropyMean), whose gradients keep nothing in float32;
// and the latter with the batch handed over in the compute dtype instead of float32 (the float32
// batch is an argument of the step, alive throughout, and its bfloat16 copy is kept for the first
// matmul's gradient).
//
// Reported: act-MiB, the activations alive at the simulated peak (analysis.Analyze, which counts the
// data batch as an activation); peak-MiB, the simulated peak above the step's arguments; heap-MiB,
// the measured Go heap peak above the pre-step baseline (heapmeter.MeasurePeak, GOGC=10); and
// ns/op. BenchmarkMLPStepRatio reports the bfloat16/float32 ratios of activations and of the peak,
// and of step time measured alternately in one run. GoMLX v0.26.0's embedded backend has no native
// bfloat16 arithmetic, so bfloat16 is expected to save memory, not time, there.

var benchPolicies = []string{"float32", "params=float32,compute=bfloat16,output=float32"}

// mlpVariant is a writing of the model (see mlpModels) and whether the batch arrives already in
// the compute dtype (cast by the input pipeline) rather than in float32 (cast inside the step).
type mlpVariant struct {
	name           string
	model          func(*context.Context, mixed.Policy, *graph.Node, *graph.Node) *graph.Node
	batchInCompute bool
}

var benchVariants = []mlpVariant{
	{"tutorialmlp", mlpLoss, false},
	{"islands", islandsMLPLoss, false},
	{"islands_batch_in_compute_dtype", islandsMLPLoss, true},
}

// mlpTrainStep is the tutorial MLP's train step under policy, as a ContextProgram/NewExec function.
func mlpTrainStep(model func(*context.Context, mixed.Policy, *graph.Node, *graph.Node) *graph.Node,
	policy mixed.Policy) func(ctx *context.Context, in []*graph.Node) []*graph.Node {
	opt := withLossScale(optimizers.Adam().Done(), mixed.NewDynamicLossScale())
	return func(ctx *context.Context, in []*graph.Node) []*graph.Node {
		loss := model(ctx, policy, in[0], in[1])
		opt.UpdateGraph(ctx, loss.Graph(), loss)
		return []*graph.Node{loss}
	}
}

// mlpStepBench holds one policy's analysis and a ready-to-run executor.
type mlpStepBench struct {
	policy mixed.Policy
	memory *analysis.Memory
	run    func() error
	close  func()
}

func newMLPStepBench(b *testing.B, variant mlpVariant, spec string) *mlpStepBench {
	policy, err := mixed.ParsePolicy(spec)
	if err != nil {
		b.Fatal(err)
	}
	batchDType := f32
	if variant.batchInCompute {
		batchDType = policy.Compute
	}
	inputs := []shapes.Shape{
		shapes.Make(batchDType, tutorialmlp.Batch, tutorialmlp.Inputs),
		shapes.Make(labelsDType, tutorialmlp.Batch),
	}
	p, err := analysis.ContextProgram(embedded(), context.New(), "mlp_step", inputs, mlpTrainStep(variant.model, policy))
	if err != nil {
		b.Fatal(err)
	}
	memory := analysis.Analyze(p)

	exec, err := context.NewExec(embedded(), context.New(), mlpTrainStep(variant.model, policy))
	if err != nil {
		b.Fatal(err)
	}
	x, y := tutorialmlp.RandomBatch(1, tutorialmlp.Batch)
	if batchDType != f32 {
		x = convertTensor(b, x, batchDType)
	}
	run := func() error { _, err := exec.Exec(x, y); return err }
	for range 2 { // compile and create the optimizer state
		if err := run(); err != nil {
			b.Fatal(err)
		}
	}
	return &mlpStepBench{policy: policy, memory: memory, run: run, close: exec.Finalize}
}

func mib(bytes int64) float64 { return float64(bytes) / (1 << 20) }

func BenchmarkMLPStep(b *testing.B) {
	for _, variant := range benchVariants {
		for _, spec := range benchPolicies {
			b.Run(variant.name+"/"+spec, func(b *testing.B) {
				s := newMLPStepBench(b, variant, spec)
				defer s.close()
				heap, err := heapmeter.MeasurePeak(s.run)
				if err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				for b.Loop() {
					if err := s.run(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(mib(s.memory.Breakdown[analysis.Activations]), "act-MiB")
				b.ReportMetric(mib(s.memory.PeakTempBytes), "peak-MiB")
				b.ReportMetric(mib(heap.AboveBaseline()), "heap-MiB")
			})
		}
	}
}

func BenchmarkMLPStepRatio(b *testing.B) {
	for _, variant := range benchVariants {
		b.Run(variant.name, func(b *testing.B) { benchmarkRatio(b, variant) })
	}
}

func benchmarkRatio(b *testing.B, variant mlpVariant) {
	full, half := newMLPStepBench(b, variant, benchPolicies[0]), newMLPStepBench(b, variant, benchPolicies[1])
	defer full.close()
	defer half.close()
	var fullTime, halfTime time.Duration
	b.ResetTimer()
	for b.Loop() {
		for _, s := range []struct {
			bench *mlpStepBench
			total *time.Duration
		}{{full, &fullTime}, {half, &halfTime}} {
			start := time.Now()
			if err := s.bench.run(); err != nil {
				b.Fatal(err)
			}
			*s.total += time.Since(start)
		}
	}
	actFull, actHalf := full.memory.Breakdown[analysis.Activations], half.memory.Breakdown[analysis.Activations]
	b.ReportMetric(float64(actHalf)/float64(actFull), "act-ratio")
	b.ReportMetric(float64(half.memory.PeakTempBytes)/float64(full.memory.PeakTempBytes), "peak-ratio")
	b.ReportMetric(float64(halfTime)/float64(fullTime), "time-ratio")
	b.Logf("activations at peak: float32 %.2f MiB, bfloat16 %.2f MiB; step: float32 %s, bfloat16 %s",
		mib(actFull), mib(actHalf), (fullTime / time.Duration(b.N)).Round(time.Microsecond),
		(halfTime / time.Duration(b.N)).Round(time.Microsecond))
	for _, s := range []*mlpStepBench{full, half} {
		b.Logf("%s: peak %.2f MiB above arguments at %s; breakdown %s", s.policy, mib(s.memory.PeakTempBytes),
			s.memory.PeakAt.Type(), breakdown(s.memory))
	}
}

func breakdown(m *analysis.Memory) string {
	s := ""
	for _, k := range analysis.Kinds() {
		s += fmt.Sprintf("%s=%.2fMiB ", k, mib(m.Breakdown[k]))
	}
	return s
}

// convertTensor converts a tensor to dtype with a one-op graph (as an input pipeline would).
func convertTensor(b *testing.B, t *tensors.Tensor, dtype dtypes.DType) *tensors.Tensor {
	exec, err := graph.NewExec(embedded(), func(x *graph.Node) *graph.Node { return graph.ConvertDType(x, dtype) })
	if err != nil {
		b.Fatal(err)
	}
	defer exec.Finalize()
	out, err := exec.Exec(t)
	if err != nil {
		b.Fatal(err)
	}
	return out[0]
}
