package plan_test

import (
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/onegpu/onegpu/data"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/optim"
	"github.com/onegpu/onegpu/plan"
	"github.com/onegpu/onegpu/recipes"
	"github.com/onegpu/onegpu/train"
)

// TestStreamedTinyGPT: the streamed estimate's parts of the tiny GPT (hidden 64, 2 layers, MLP ×4,
// sequence 64, vocabulary 256, batch 16 in 4 micro-batches, bf16 compute) against numbers counted
// by hand and against the whole step's variables.
func TestStreamedTinyGPT(t *testing.T) {
	backend := testkit.Embedded()
	config, err := recipes.Defaults("gpt", "tiny")
	if err != nil {
		t.Fatal(err)
	}
	s, err := plan.EstimateStreamed(backend, config, plan.StreamOptions{Throughput: plan.A5000})
	if err != nil {
		t.Fatal(err)
	}
	const h, seq, vocab, layers = 64, 64, 256, 2
	// By hand: the token and position embeddings; per block two LayerNorms (gain and offset), the
	// attention's qkv and output projections and the MLP's two layers, all with biases; the head's
	// LayerNorm and output layer.
	embed := vocab*h + seq*h
	block := 2*2*h + (h*3*h + 3*h) + (h*h + h) + (h*4*h + 4*h) + (4*h*h + h)
	head := 2*h + h*vocab + vocab
	want := map[string]int64{"embed": int64(embed), "block": int64(block), "head": int64(head)}
	for _, st := range s.Stages {
		if st.Params != want[st.Name] {
			t.Errorf("stage %s: %d parameters, want %d", st.Name, st.Params, want[st.Name])
		}
		// Adam: two float32 moments per parameter, and the step counters once.
		if extra := st.StateBytes - 8*st.Params; extra < 0 || extra > 64 {
			t.Errorf("stage %s: %d bytes of Adam state for %d parameters", st.Name, st.StateBytes, st.Params)
		}
	}
	total := int64(embed + layers*block + head)
	if s.Params != total || s.Params != wholeStepParams(t, config) {
		t.Errorf("%d parameters, want %d (and the whole step's %d)", s.Params, total, wholeStepParams(t, config))
	}
	if s.Stages[1].Count != layers {
		t.Errorf("%d blocks, want %d", s.Stages[1].Count, layers)
	}
	largest := int64(max(embed, block, head))
	checks := []struct {
		name      string
		got, want int64
	}{
		// the float32 masters, as the device holds them (a bfloat16 copy is widened on arrival)
		{"stage weights (float32)", s.StageWeightBytes, 4 * largest},
		// the largest matrices (the MLP's and the head's, 64 × 256) in bfloat16 until widened
		{"bfloat16 copy", s.WidenBytes, 2 * h * 4 * h},
		{"device weights (double buffer)", s.DeviceWeightBytes, 8*largest + 2*h*4*h},
		{"device gradients (float32)", s.DeviceGradientBytes, 4 * largest},
		// every block's input and the head's, batch 16 × 64 tokens × 64, bf16
		{"kept inputs", s.KeptInputBytes, (layers + 1) * 16 * seq * h * 2},
		{"device", s.DeviceBytes, s.DeviceWeightBytes + s.DeviceGradientBytes + s.WorkBytes + s.KeptInputBytes},
		{"masters", s.MasterBytes, 4 * total},
		{"host gradients", s.HostGradientBytes, 4 * total},
		{"host", s.HostBytes, s.MasterBytes + s.StateBytes + s.HostGradientBytes},
		// weights down twice (forward, backward) but the head's once, in bf16 (the tiny GPT reads
		// every weight rounded to bf16); gradients up in float32
		{"to device", s.BytesToDevice, 2 * (2*int64(embed+layers*block) + int64(head))},
		{"to host", s.BytesToHost, 4 * total},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: %d bytes, want %d", c.name, c.got, c.want)
		}
	}
	if s.WorkBytes <= 0 || s.FLOPs <= 0 {
		t.Errorf("working memory %d, FLOPs %d", s.WorkBytes, s.FLOPs)
	}
}

// TestStreamedTightestRuns: the planner answers only what the streamed executor runs: the small
// GPT's streamed step (4 blocks, every block's input kept on the device: the executor keeps them
// there) trains 2 steps under a device budget of exactly the planner's estimate, its largest
// device footprint (train.StreamStats.DevicePeakBytes, the executor's own account) within it
// (0.91x the plan on the embedded backend, 0.93x on XLA), and the bytes it sends to the device are
// the planned weights' and the batch's, on the embedded backend with the run's bfloat16 compute
// and on XLA in float32 (XLA's CPU compiler emulates bfloat16 with wider temporaries than the
// estimate counts).
func TestStreamedTightestRuns(t *testing.T) {
	for _, backend := range testkit.All() {
		t.Run(backend.Name(), func(t *testing.T) {
			config, err := recipes.Defaults("gpt", "small")
			if err != nil {
				t.Fatal(err)
			}
			g := config.Model.(models.GPT)
			g.Config.Layers, g.Config.Dropout = 4, 0
			config.Model, config.Batch, config.MicroBatches = g, 4, 2
			if backend != testkit.Embedded() {
				config.Policy = mixed.Float32
			}
			s, err := plan.EstimateStreamed(backend, config, plan.StreamOptions{Throughput: plan.A5000})
			if err != nil {
				t.Fatal(err)
			}
			compute := int64(config.Policy.Compute.Size())
			if want := int64(g.Config.Layers+1) * int64(config.Batch*g.Config.SeqLen*g.Config.Hidden) * compute; s.KeptInputBytes != want {
				t.Errorf("kept inputs %d bytes, want every block's and the head's on the device: %d", s.KeptInputBytes, want)
			}
			config.Offload, config.DeviceBudget = train.OffloadParams, s.DeviceBytes
			tr, err := train.New(backend, config)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			batches, err := data.NewSyntheticTokens(config.Batch, g.Config.SeqLen, g.Config.Vocab, 1)
			if err != nil {
				t.Fatal(err)
			}
			h, err := tr.Run(batches, train.RunOptions{Steps: 2})
			if err != nil {
				t.Fatalf("the planner's streamed step (%d bytes on the device) under its own budget: %v", s.DeviceBytes, err)
			}
			stats := h.Offload.(*train.StreamStats)
			var batch int64 // the executor counts the batch it sends too
			for _, in := range config.Model.InputShapes(config.Batch) {
				batch += int64(in.Memory())
			}
			if stats.BytesToDevice != s.BytesToDevice+batch {
				t.Errorf("the executor sent %d bytes to the device, the planner's weights %d and the batch %d", stats.BytesToDevice, s.BytesToDevice, batch)
			}
			peak := stats.DevicePeakBytes
			t.Logf("planned %d bytes on the device, the executor's largest footprint %d (%.2fx)", s.DeviceBytes, peak, float64(peak)/float64(s.DeviceBytes))
			if peak <= 0 || peak > s.DeviceBytes {
				t.Errorf("largest device footprint %d bytes, planned %d", peak, s.DeviceBytes)
			}
		})
	}
}

// wholeStepParams counts the trainable parameters of config's whole step (its program's
// trainable parameters).
func wholeStepParams(t *testing.T, config train.Config) int64 {
	t.Helper()
	e, err := train.New(testkit.Embedded(), config)
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.Program()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Graph.Finalize()
	var n int64
	for _, node := range p.Graph.Nodes() {
		if p.Trainable[node.Id()] {
			n += int64(node.Shape().Size())
		}
	}
	return n
}

// TestStreamedState: the optimizer's host state per parameter: Adam 8 bytes, 8-bit Adam about 2
// (codes, and a float32 scale per block of 2048; small tensors keep float32 moments), Adafactor a
// fraction of a byte on the tutorial GPT's factored matrices.
func TestStreamedState(t *testing.T) {
	backend := testkit.Embedded()
	config, err := recipes.Defaults("gpt", "tutorial")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name     string
		opt      optim.Optimizer
		low, top float64
	}{
		{"adam", optim.Adam().Done(), 8, 8.0001},
		{"adam8bit", optim.Adam8bit().Done(), 2, 2.05},
		{"adafactor", optim.Named("adafactor", optim.Adafactor().Done()), 0, 0.1},
	} {
		config.Optimizer = c.opt
		s, err := plan.EstimateStreamed(backend, config, plan.StreamOptions{Throughput: plan.A5000})
		if err != nil {
			t.Fatal(err)
		}
		if perParam := float64(s.StateBytes) / float64(s.Params); perParam < c.low || perParam > c.top {
			t.Errorf("%s: %.4f bytes of state per parameter, want %g..%g", c.name, perParam, c.low, c.top)
		}
		if s.Params != 155_877_376 {
			t.Errorf("%s: %d parameters, want the tutorial GPT's 155,877,376", c.name, s.Params)
		}
	}
}

// TestStreamedStepTime: each part's total from the FLOPs, the bytes and the parameters; the
// step's time is the executor's schedule, between the largest part and all of them in series; a
// slow device alone sets the step, a slow host alone sets it once the first gradients are in (the
// host works while the device runs the backward pass), and with the host as slow as the device the
// overlapped step is well under the serialized one (Config.SerialHostUpdate), which is about their
// sum; the bound is the largest part.
func TestStreamedStepTime(t *testing.T) {
	config, err := recipes.Defaults("gpt", "tiny")
	if err != nil {
		t.Fatal(err)
	}
	backend := testkit.Embedded()
	base, err := plan.EstimateStreamed(backend, config, plan.StreamOptions{Throughput: plan.A5000})
	if err != nil {
		t.Fatal(err)
	}
	if base.HostParamsPerSec != plan.DefaultHostRates["adam"] || base.BusBytesPerSec != plan.PCIe5Bandwidth {
		t.Errorf("default rates: %+v", base.StepTime)
	}
	slowDevice := plan.Throughput{Float32: plan.MinTFLOPs, BFloat16: plan.MinTFLOPs}
	// The host update as long as the device's compute.
	balanced := float64(base.Params) / (float64(base.FLOPs) / (plan.MinTFLOPs * 1e12))
	for _, c := range []struct {
		name  string
		o     plan.StreamOptions
		bound string
	}{
		{"slow host", plan.StreamOptions{HostRate: 1}, plan.BoundHostUpdate},
		{"slow bus", plan.StreamOptions{HostRate: 1e15, Bandwidth: 1}, plan.BoundBus},
		{"slow device", plan.StreamOptions{HostRate: 1e15, Bandwidth: 1e15, Throughput: slowDevice}, plan.BoundCompute},
		{"host as slow as the device", plan.StreamOptions{HostRate: balanced, Bandwidth: 1e15, Throughput: slowDevice}, ""},
	} {
		if c.o.Throughput == (plan.Throughput{}) {
			c.o.Throughput = plan.A5000
		}
		s, err := plan.EstimateStreamed(backend, config, c.o)
		if err != nil {
			t.Fatal(err)
		}
		tflops := c.o.Throughput.BFloat16 // the tiny preset computes in bf16
		if config.Policy.Compute != dtypes.BFloat16 {
			t.Fatalf("the tiny preset computes in %s", config.Policy.Compute)
		}
		compute := float64(s.FLOPs) / (tflops * 1e12)
		bus := float64(max(s.BytesToDevice, s.BytesToHost)) / s.BusBytesPerSec
		host := float64(s.Params) / s.HostParamsPerSec
		if s.ComputeSeconds != compute || s.TransferSeconds != bus || s.HostSeconds != host {
			t.Errorf("%s: %+v, want compute %g, bus %g, host %g", c.name, s.StepTime, compute, bus, host)
		}
		series := compute + float64(s.BytesToDevice+s.BytesToHost)/s.BusBytesPerSec + host
		if longest := max(compute, bus, host); s.Seconds < longest*(1-1e-12) || s.Seconds > s.SerialSeconds || s.SerialSeconds > series*(1+1e-12) {
			t.Errorf("%s: step %g s, serialized %g s: want from the largest part (%g s) to all in series (%g s)", c.name, s.Seconds, s.SerialSeconds, longest, series)
		}
		switch c.name {
		case "slow device":
			if rel := s.Seconds/compute - 1; rel > 1e-6 {
				t.Errorf("slow device: step %g s, compute %g s", s.Seconds, compute)
			}
		case "slow host":
			if rel := s.Seconds/host - 1; rel > 1e-9 {
				t.Errorf("slow host: step %g s, host update %g s", s.Seconds, host)
			}
		case "host as slow as the device":
			// 0.77x here: two blocks only, the forward pass (a third of the compute) and the
			// embedding's update (15% of the parameters, the last gradients) overlap nothing.
			if s.Seconds > 0.8*s.SerialSeconds || s.SerialSeconds < (compute+host)*(1-1e-6) {
				t.Errorf("host as slow as the device (%g s, %g s): step %g s, serialized %g s", compute, host, s.Seconds, s.SerialSeconds)
			}
			t.Logf("host as slow as the device: step %.3f s, serialized %.3f s (compute %.3f s, host %.3f s)", s.Seconds, s.SerialSeconds, compute, host)
		}
		if c.bound != "" && s.Bound != c.bound {
			t.Errorf("%s: bound %q, want %q", c.name, s.Bound, c.bound)
		}
	}
}

// TestStreamedRefuses: a model that does not run as stages, and rates that cannot be.
func TestStreamedRefuses(t *testing.T) {
	backend := testkit.Embedded()
	mlp, err := recipes.Defaults("mlp", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plan.EstimateStreamed(backend, mlp, plan.StreamOptions{Throughput: plan.A5000}); err == nil || !strings.Contains(err.Error(), "does not run as stages") {
		t.Errorf("the MLP streamed: %v", err)
	}
	gpt, err := recipes.Defaults("gpt", "tiny")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []plan.StreamOptions{{Throughput: plan.A5000, Bandwidth: -1}, {Throughput: plan.A5000, HostRate: -5}, {}} {
		if _, err := plan.EstimateStreamed(backend, gpt, o); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
	gpt.Optimizer = optim.Named("sgd", optim.Adam().Done())
	if _, err := plan.EstimateStreamed(backend, gpt, plan.StreamOptions{Throughput: plan.A5000}); err == nil || !strings.Contains(err.Error(), "--host-rate") {
		t.Errorf("an optimizer without a measured rate: %v", err)
	}
}

// TestLargestStreamedGPT: the streamed search's answer fits both budgets and the next size of the
// family does not; at 24 GiB and a 128 GiB host Adam is bounded by the host's 16 bytes a parameter
// (masters, two moments, gradients) and 8-bit Adam (about 10) reaches more parameters.
func TestLargestStreamedGPT(t *testing.T) {
	backend := testkit.Embedded()
	base, err := recipes.Defaults("gpt", "tutorial")
	if err != nil {
		t.Fatal(err)
	}
	const budget, host = 24 << 30, 128 << 30
	var params []int64
	for _, opts := range plan.StreamedTechniques {
		row, err := plan.LargestStreamed(backend, base, plan.ScaledGPTs(), budget, host, opts, plan.StreamOptions{Throughput: plan.A5000}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !row.Fits || row.Memory > budget || row.HostMemory > host || row.Options.Offload != "params" || row.Step == nil {
			t.Fatalf("%s: %+v", opts.Name, row)
		}
		n := row.Hidden / 128
		next := base
		next.Model = models.GPT{Config: plan.ScaledGPT(n + 1)}
		next.Optimizer, _ = optim.ByName(opts.Optimizer, optim.Settings{})
		fitsNext := false
		for _, v := range []plan.Variant{{Compute: "bfloat16", Remat: "block", MicroBatches: 4}, {Compute: "bfloat16", Remat: "block", MicroBatches: 1}} {
			c, err := v.Apply(next)
			if err != nil {
				t.Fatal(err)
			}
			s, err := plan.EstimateStreamed(backend, c, plan.StreamOptions{Throughput: plan.A5000})
			if err != nil {
				t.Fatal(err)
			}
			fitsNext = fitsNext || s.DeviceBytes <= budget && s.HostBytes <= host
		}
		if fitsNext {
			t.Errorf("%s: the next size (scale %d) fits too", opts.Name, n+1)
		}
		params = append(params, row.Params)
	}
	// Adam: 16 bytes a parameter on the host, so at most 128 GiB / 16.
	if params[0] > host/16 || params[0] < 7_000_000_000 {
		t.Errorf("Adam: %d parameters", params[0])
	}
	if params[1] <= params[0] {
		t.Errorf("8-bit Adam: %d parameters, no more than Adam's %d", params[1], params[0])
	}
}
