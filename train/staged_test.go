package train_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/data"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/optim"
	"github.com/onegpu/onegpu/quant"
	"github.com/onegpu/onegpu/train"
)

// stagedStats is what a staged run's executor reported, or fails.
func stagedStats(t *testing.T, s train.Stats) *train.StagedStats {
	t.Helper()
	stats, ok := s.(*train.StagedStats)
	if !ok {
		t.Fatalf("the executor reported %#v, want a staged step's *train.StagedStats", s)
	}
	return stats
}

// TestStagedMatchesWholeStep: --offload staged (the stages' programs with the whole state on the
// device) trains the tiny GPT (float32, 2 micro-batches) as the whole step does, on the embedded
// backend and on XLA: losses within 1e-5 relative over 10 steps. Without a loss scale or a clip
// each stage updates after its backward pass: the most gradient bytes held at once are the
// largest stage's.
func TestStagedMatchesWholeStep(t *testing.T) {
	t.Parallel()
	for _, backend := range testkit.All() {
		t.Run(backend.Name(), func(t *testing.T) {
			config := streamConfig(t)
			whole, want := runOffload(t, backend, config, 10, "")
			defer whole.Close()
			config.Offload = train.OffloadStaged
			staged, got := runOffload(t, backend, config, 10, "")
			defer staged.Close()
			sameLosses(t, want, got, 1e-5)
			stats, g := stagedStats(t, staged.ExecutorStats()), gptOf(config)
			embed := int64(g.Vocab*g.Hidden + g.SeqLen*g.Hidden)
			head := int64(g.Hidden*g.Vocab + g.Vocab + 2*g.Hidden)
			block := (g.Params() - embed - head) / int64(g.Layers)
			if largest := 4 * max(embed, head, block); stats.GradientBytes != largest {
				t.Errorf("%d gradient bytes held at once, want the largest stage's, %d", stats.GradientBytes, largest)
			}
			t.Logf("%.1f ms in the stages, %.1f ms updating; largest device use %d bytes, %d of gradients", 1e3*stats.DeviceSeconds,
				1e3*stats.UpdateSeconds, stats.DevicePeakBytes, stats.GradientBytes)
		})
	}
}

// TestStagedTechniques: the staged step keeps every technique of the whole step (embedded
// backend, 5 steps): bfloat16 compute with remat of the MLP and attention and with remat of
// whole blocks (within 1e-3 relative), a dynamic loss scale with 8-bit Adam (within 1e-5), a loss
// scale so large that every step overflows (every step skipped by both, nothing updated), an
// active global-norm clip (within 1e-5), dropout with one micro-batch (the same masks: within
// 1e-5), chunked attention and loss (within 1e-5). With a loss scale or a clip the gradients wait
// for the step-wide check: the most held at once are all of them.
func TestStagedTechniques(t *testing.T) {
	if testing.Short() {
		t.Skip("trains 7 runs of 5 steps twice")
	}
	t.Parallel()
	bf16, err := mixed.ParsePolicy("params=float32,compute=bfloat16,output=float32")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		edit func(c *train.Config)
		tol  float64
	}{
		{"bf16-remat", func(c *train.Config) { c.Policy, c.Remat = bf16, train.Remat{Kinds: []string{"mlp", "attn"}} }, 1e-3},
		{"bf16-remat-block", func(c *train.Config) { c.Policy, c.Remat = bf16, train.Remat{Kinds: []string{"block"}} }, 1e-3},
		{"adam8bit-dynamic", func(c *train.Config) {
			c.Optimizer, c.LossScale = optim.Adam8bit().Done(), mixed.NewDynamicLossScale()
		}, 1e-5},
		{"overflow", func(c *train.Config) { c.LossScale = mixed.StaticLossScale(3e38) }, 0},
		{"clip", func(c *train.Config) { c.ClipNorm = 0.05 }, 1e-5},
		{"dropout", func(c *train.Config) {
			c.MicroBatches = 1
			editGPT(c, func(g *models.GPTConfig) { g.Dropout = 0.1 })
		}, 1e-5},
		{"chunked", func(c *train.Config) {
			c.Attention, c.CrossEntropy = layers.Attention{Chunked: true, Block: 8}, layers.CrossEntropy{Chunk: 40}
		}, 1e-5},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			config := streamConfig(t)
			c.edit(&config)
			whole, want := runOffload(t, embedded(), config, 5, "")
			defer whole.Close()
			config.Offload = train.OffloadStaged
			staged, got := runOffload(t, embedded(), config, 5, "")
			defer staged.Close()
			sameLosses(t, want, got, c.tol)
			stats := stagedStats(t, got.Offload)
			if all := 4 * gptOf(config).Params(); (config.LossScale != nil || config.ClipNorm > 0) && stats.GradientBytes != all {
				t.Errorf("%d gradient bytes held at once under a loss scale or a clip, want all %d", stats.GradientBytes, all)
			}
			if c.name == "overflow" {
				for i, s := range got.Steps {
					if !s.Skipped {
						t.Errorf("step %d was not skipped", i+1)
					}
				}
				if staged.GlobalStep() != 0 {
					t.Errorf("%d updates applied, want none", staged.GlobalStep())
				}
			}
		})
	}
}

// TestStagedCheckpointsCrossModes: a checkpoint written by a staged run resumes in a whole-step
// run and in a streamed one, and the reverse (the same variables, by name), and each resumed run's
// losses equal an uninterrupted whole run's within 1e-5 relative.
func TestStagedCheckpointsCrossModes(t *testing.T) {
	config := streamConfig(t)
	config.LossScale = mixed.NewDynamicLossScale()
	straight, want := runOffload(t, embedded(), config, 4, "")
	straight.Close()
	for _, pair := range [][2]train.Offload{
		{train.OffloadStaged, train.OffloadNone}, {train.OffloadNone, train.OffloadStaged},
		{train.OffloadStaged, train.OffloadParams}, {train.OffloadParams, train.OffloadStaged},
	} {
		t.Run(fmt.Sprintf("%s-then-%s", pair[0], pair[1]), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run")
			c := config
			c.Offload = pair[0]
			head, h1 := runOffload(t, embedded(), c, 2, dir)
			head.Close()
			c.Offload = pair[1]
			tail, h2 := runOffload(t, embedded(), c, 4, dir)
			tail.Close()
			sameLosses(t, want, &train.History{Steps: append(h1.Steps, h2.Steps...)}, 1e-5)
		})
	}
}

// TestStagedLlama: the tiny Llama (tied embeddings: the head's gradient of the table waits for
// the embedding's, they add up and the table updates once) trains staged as its whole step does:
// float32 losses within 1e-5 relative (embedded backend).
func TestStagedLlama(t *testing.T) {
	llama, err := models.NewLlama(models.LlamaPresets["tiny"])
	if err != nil {
		t.Fatal(err)
	}
	config := streamConfig(t)
	config.Model, config.Remat = llama, train.Remat{}
	whole, want := runLlama(t, embedded(), config)
	defer whole.Close()
	config.Offload = train.OffloadStaged
	staged, got := runLlama(t, embedded(), config)
	defer staged.Close()
	sameLosses(t, want, got, 1e-5)
}

// TestStagedLoRA: a LoRA run (rank 4 on every projection of the tiny Llama, 2 micro-batches)
// trains staged as its whole step does, with the base as floats and in NF4 (QLoRA): losses within
// 1e-5 relative over 4 steps; the frozen base is bound like the weights, only the adapters
// update.
func TestStagedLoRA(t *testing.T) {
	for name, q := range map[string]quant.Config{"lora": {}, "qlora": quant.QLoRA()} {
		t.Run(name, func(t *testing.T) {
			config := llamaReference(t)
			config.MicroBatches = 2
			config.LoRA = layers.LoRA{Rank: 4, Alpha: 8, Targets: allProjections, Quantize: q}
			seq, _ := config.Model.(train.LanguageModel).TokenShape()
			batches, err := data.NewText(data.Corpus, config.Batch, seq, 2)
			if err != nil {
				t.Fatal(err)
			}
			whole, want := runOn(t, embedded(), config, batches, 4, "")
			whole.Close()
			config.Offload = train.OffloadStaged
			staged, got := runOn(t, embedded(), config, batches, 4, "")
			defer staged.Close()
			sameLosses(t, want, got, 1e-5)
			if !(got.Steps[3].Loss < got.Steps[0].Loss) {
				t.Errorf("losses %v: want a fall", got.Steps)
			}
		})
	}
}

// TestStagedRefuses: a model that does not run as stages, a device budget and several devices
// are refused before anything is built, each naming the fix.
func TestStagedRefuses(t *testing.T) {
	mlp := smallMLP(t)
	mlp.Offload = train.OffloadStaged
	gpt := streamConfig(t)
	gpt.Offload = train.OffloadStaged
	budget, devices := gpt, gpt
	budget.DeviceBudget, devices.Devices = 1<<30, train.Devices{Count: 2}
	for name, c := range map[string]train.Config{"mlp": mlp, "budget": budget, "2 devices": devices} {
		if _, err := train.New(embedded(), c); err == nil || !strings.Contains(err.Error(), "Config.Offload staged") {
			t.Errorf("%s: %v, want an error about Config.Offload staged", name, err)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

// TestStagedMemoryIsTheRematBlockStepsOrLess: on XLA, the staged step's largest device footprint
// (the variables, the buffers it holds and each program's outputs, temporaries and code by XLA's
// account) is at most the whole step's with remat of whole blocks (XLA's compiled total: its
// arguments, outputs and temporaries), for a GPT of 2 blocks of 256 at sequence 128 (float32, 2
// micro-batches of 2) under a dynamic loss scale (every gradient held for the finite check; without
// one a stage's gradients at a time: TestStagedMatchesWholeStep).
func TestStagedMemoryIsTheRematBlockStepsOrLess(t *testing.T) {
	backend := testkit.RequireXLA(t)
	config := streamConfig(t)
	config.Batch, config.Remat = 4, train.Remat{Kinds: []string{models.KindBlock}}
	editGPT(&config, func(g *models.GPTConfig) { *g = models.Presets["small"]; g.Layers, g.Dropout = 2, 0 })
	config.LossScale = mixed.NewDynamicLossScale()
	whole, err := train.New(backend, config)
	if err != nil {
		t.Fatal(err)
	}
	p, err := whole.Program()
	if err != nil {
		t.Fatal(err)
	}
	mem, err := analysis.CompileProgram(p)
	p.Graph.Finalize()
	if err != nil {
		t.Fatal(err)
	}
	config.Offload = train.OffloadStaged
	staged, h := runOffload(t, backend, config, 1, "")
	defer staged.Close()
	stats := stagedStats(t, h.Offload)
	t.Logf("staged %d bytes at most (gradients %d), whole step with remat block %d (%.3fx)", stats.DevicePeakBytes, stats.GradientBytes,
		mem.TotalBytes(), float64(stats.DevicePeakBytes)/float64(mem.TotalBytes()))
	if stats.DevicePeakBytes <= 0 || stats.DevicePeakBytes > mem.TotalBytes() {
		t.Errorf("the staged step needs %d bytes, the whole step with remat block %d: want at most as much", stats.DevicePeakBytes, mem.TotalBytes())
	}
}
