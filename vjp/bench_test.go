package vjp_test

import (
	"testing"
	"time"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/internal/tutorialmlp"
	"github.com/onegpu/onegpu/vjp"
)

// BenchmarkMLPTrainStepGradients times the tutorial MLP's train step (batch 512, Adam) on the
// embedded backend with onegpu's gradient rules and with GoMLX v0.26.0's, interleaved in one loop
// so that the ratios compare like with like on a shared machine. It also reports the estimated
// peak memory of each.
//
//	go test ./vjp -run XXX -bench MLPTrainStepGradients -benchtime 10x
func BenchmarkMLPTrainStepGradients(b *testing.B) {
	x, labels := tutorialmlp.RandomBatch(1, tutorialmlp.Batch)
	variants := []struct {
		name  string
		stock bool
	}{{"onegpu", false}, {"stock", true}}
	var elapsed [2]time.Duration
	var peak [2]int64
	var execs [2]*context.Exec
	for i, v := range variants {
		fn := func(ctx *context.Context, in []*graph.Node) []*graph.Node {
			if v.stock {
				vjp.UseStock(in[0].Graph())
			}
			p := tutorialmlp.ContextParams(ctx, in[0].Graph(), 1)
			loss := tutorialmlp.Loss(tutorialmlp.LogProbs(p, in[0], dtypes.Float32, dtypes.Float32), in[1])
			optimizers.Adam().Done().UpdateGraph(ctx, loss.Graph(), loss)
			return []*graph.Node{loss}
		}
		p, err := analysis.ContextProgram(embedded(), context.New(), v.name, []shapes.Shape{x.Shape(), labels.Shape()}, fn)
		if err != nil {
			b.Fatal(err)
		}
		peak[i] = analysis.Analyze(p).PeakBytes
		p.Graph.Finalize()
		execs[i], err = context.NewExec(embedded(), context.New(), fn)
		if err != nil {
			b.Fatal(err)
		}
		defer execs[i].Finalize()
		if _, err := execs[i].Exec(x, labels); err != nil { // compile
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		for i := range variants {
			start := time.Now()
			if _, err := execs[i].Exec(x, labels); err != nil {
				b.Fatal(err)
			}
			elapsed[i] += time.Since(start)
		}
	}
	for i, v := range variants {
		b.ReportMetric(elapsed[i].Seconds()*1000/float64(b.N), v.name+"-ms/step")
		b.ReportMetric(float64(peak[i])/(1<<20), v.name+"-peak-MiB")
	}
	b.ReportMetric(float64(elapsed[1])/float64(elapsed[0]), "stock/onegpu-time")
	b.ReportMetric(float64(peak[1])/float64(peak[0]), "stock/onegpu-peak")
}
