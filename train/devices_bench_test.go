package train_test

import (
	"flag"
	"fmt"
	"math"
	"testing"

	"github.com/onegpu/onegpu/data"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/optim"
	"github.com/onegpu/onegpu/train"
)

var (
	benchPreset = flag.String("devices.preset", "tiny", "BenchmarkDevices: GPT preset (tiny, small)")
	benchPolicy = flag.String("devices.policy", "float32", "BenchmarkDevices: precision policy")
	benchBatch  = flag.Int("devices.batch", 16, "BenchmarkDevices: sequences per step, in 4 micro-batches (16: the CPU presets' runs)")
	benchLR     = flag.Float64("devices.lr", 3e-3, "BenchmarkDevices: peak learning rate (3e-3: the tiny preset's run)")
	benchSteps  = flag.Int("devices.steps", 10, "BenchmarkDevices: steps whose losses are compared with one device")
)

// BenchmarkDevices trains the GPT preset on 1, 2 and 4 devices of the XLA plugin in each shard
// mode and reports, per configuration: the step time (ns/op, compilation excluded), what one
// device holds (state_MiB/device: weights + optimizer state from the shards' shapes;
// xla_MiB/device and xla_args_MiB/device: XLA's compiled account of the partitioned step) and the
// largest relative difference of the first -devices.steps losses from one device's (max_rel_loss).
//
//	go test ./train -run '^$' -bench Devices -benchtime 5x -args -devices.preset small
func BenchmarkDevices(b *testing.B) {
	backend := fourDevices(b)
	defer backend.Finalize()
	preset, err := models.Preset(*benchPreset)
	if err != nil {
		b.Fatal(err)
	}
	preset.Dropout = 0
	base := train.Config{Model: models.GPT{Config: preset}, Batch: *benchBatch, MicroBatches: 4, Seed: 7,
		Schedule: optim.WarmupExponentialDecay(0, *benchLR, 2, 1, 0.999)}
	if base.Policy, err = mixed.ParsePolicy(*benchPolicy); err != nil {
		b.Fatal(err)
	}
	var reference []float64
	var referenceState float64
	for _, d := range []train.Devices{{Count: 1}, {Count: 2}, {Count: 2, Shard: train.ShardOptimizer}, {Count: 2, Shard: train.ShardParams},
		{Count: 4}, {Count: 4, Shard: train.ShardOptimizer}, {Count: 4, Shard: train.ShardParams}} {
		b.Run(fmt.Sprintf("N=%d/shard=%s", max(d.Count, 1), d.Shard), func(b *testing.B) {
			config := base
			config.Devices = d
			tr, err := train.New(backend, config)
			if err != nil {
				b.Fatal(err)
			}
			defer tr.Close()
			dp, err := tr.DeviceProgram()
			if err != nil {
				b.Fatal(err)
			}
			dp.Program.Graph.Finalize()
			batches, err := data.NewSyntheticTokens(config.Batch, preset.SeqLen, preset.Vocab, 3)
			if err != nil {
				b.Fatal(err)
			}
			var losses []float64
			step := func() {
				m, err := tr.Step(batches.Batch(len(losses)))
				if err != nil {
					b.Fatal(err)
				}
				losses = append(losses, m.Loss)
			}
			b.StopTimer()
			step() // compiles
			b.StartTimer()
			for range b.N {
				step()
			}
			b.StopTimer()
			for len(losses) < *benchSteps {
				step()
			}
			losses = losses[:*benchSteps]
			state := float64(dp.PerDevice.Params+dp.PerDevice.OptimizerState) / (1 << 20)
			if reference == nil {
				reference, referenceState = losses, state
			}
			worst := 0.0
			for i := range losses {
				worst = max(worst, math.Abs(losses[i]-reference[i])/math.Abs(reference[i]))
			}
			b.ReportMetric(state, "state_MiB/device")
			b.ReportMetric(state/referenceState, "state_ratio")
			b.ReportMetric(float64(dp.PerDevice.OptimizerState)/float64(dp.Total.OptimizerState), "optstate_ratio")
			b.ReportMetric(float64(dp.Compiled.TotalBytes())/(1<<20), "xla_MiB/device")
			b.ReportMetric(float64(dp.Compiled.ArgumentBytes)/(1<<20), "xla_args_MiB/device")
			b.ReportMetric(worst, "max_rel_loss")
		})
	}
}
