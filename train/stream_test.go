package train_test

import (
	"fmt"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/backends"

	"github.com/onegpu/onegpu/data"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/optim"
	"github.com/onegpu/onegpu/train"
)

// streamConfig is the tiny GPT in float32 without dropout, with 2 micro-batches.
func streamConfig(t *testing.T) train.Config {
	c := tinyConfig(t)
	c.Policy, c.Batch, c.MicroBatches, c.Remat = mixed.Float32, 8, 2, train.Remat{}
	editGPT(&c, func(g *models.GPTConfig) { g.Dropout = 0 })
	return c
}

// streamSteps is how many steps the streamed and whole runs of a comparison train: enough for the
// updates, the moving average and a dynamic loss scale to act (6 steps; 10 cost two thirds more).
const streamSteps = 6

// sameLosses fails unless got's losses and mean losses equal want's within tol relative, and
// their accuracies count the same tokens right within 2 (a logit that rounds the other way).
func sameLosses(t *testing.T, want, got *train.History, tol float64) {
	t.Helper()
	if len(got.Steps) != len(want.Steps) {
		t.Fatalf("%d steps streamed, %d whole", len(got.Steps), len(want.Steps))
	}
	worst := 0.0
	for i, w := range want.Steps {
		g := got.Steps[i]
		if g.Skipped != w.Skipped {
			t.Errorf("step %d: skipped %v streamed, %v whole", i+1, g.Skipped, w.Skipped)
		}
		if d := math.Abs(g.Accuracy-w.Accuracy) * w.Count; d > 2.5 {
			t.Errorf("step %d: accuracy %.9g streamed, %.9g whole: %.0f tokens apart", i+1, g.Accuracy, w.Accuracy, d)
		}
		for name, pair := range map[string][2]float64{"loss": {g.Loss, w.Loss}, "mean loss": {g.MeanLoss, w.MeanLoss}} {
			rel := math.Abs(pair[0]-pair[1]) / math.Max(math.Abs(pair[1]), 1e-30)
			worst = max(worst, rel)
			if rel > tol || math.IsNaN(pair[0]) != math.IsNaN(pair[1]) {
				t.Errorf("step %d: %s %.9g streamed, %.9g whole (rel. %.2g > %g)", i+1, name, pair[0], pair[1], rel, tol)
			}
		}
	}
	t.Logf("largest relative difference over %d steps: %.2g", len(want.Steps), worst)
}

// TestStreamedMatchesWholeStep: --offload params (the model streamed a stage at a time, the
// master weights and Adam on the host) trains the tiny GPT as the whole step does, on the
// embedded backend and on XLA: float32 losses within 1e-5 relative over streamSteps; bfloat16 compute
// with remat within 1e-3 on the embedded backend (not in -short; on XLA, TestStreamedLlama's
// bfloat16 case streams bfloat16 with remat: compiling the GPT's too took 72 of this test's 148 s).
// Per step each stage's weights cross twice (once for the head, whose one program computes the
// loss and its gradients; in bfloat16 under a bfloat16 compute policy) and every gradient once.
func TestStreamedMatchesWholeStep(t *testing.T) {
	t.Parallel()
	bf16, err := mixed.ParsePolicy("params=float32,compute=bfloat16,output=float32")
	if err != nil {
		t.Fatal(err)
	}
	for _, backend := range testkit.All() {
		for _, policy := range []mixed.Policy{mixed.Float32, bf16} {
			t.Run(backend.Name()+"/"+policy.String(), func(t *testing.T) {
				config, tol := streamConfig(t), 1e-5
				if policy != mixed.Float32 {
					if testing.Short() || backend != testkit.Embedded() {
						t.Skip("bfloat16 streams on the embedded backend in the full tests (on XLA: TestStreamedLlama)")
					}
					config.Policy, config.Remat, tol = policy, train.Remat{Kinds: []string{"mlp", "attn"}}, 1e-3
				}
				whole, want := runOffload(t, backend, config, streamSteps, "")
				defer whole.Close()
				config.Offload = train.OffloadParams
				streamed, got := runOffload(t, backend, config, streamSteps, "")
				defer streamed.Close()
				sameLosses(t, want, got, tol)
				stats, params := streamStats(t, streamed.ExecutorStats()), 4*gptOf(config).Params()
				if want := streamedUpload(config); stats.BytesToHost != params || stats.BytesToDevice != want {
					t.Errorf("traffic %+v: want %d bytes to the device (the weights twice but the head's once, in the compute dtype, and the tokens), and %d of gradients back",
						stats, want, params)
				}
				t.Logf("per step: %d bytes to the device, %d back, %.1f ms moving, %.1f ms host update",
					stats.BytesToDevice, stats.BytesToHost, 1e3*stats.TransferSeconds, 1e3*stats.HostSeconds)
			})
		}
	}
}

// TestStreamedTechniques: the streamed step keeps every technique of the whole step: bfloat16
// compute with remat of the MLP and attention (losses within 1e-3 relative over streamSteps), a
// dynamic loss scale with 8-bit Adam (within 1e-5), a loss scale so large that every step's
// gradients overflow (every step skipped by both, nothing updated), a global-norm clip that acts
// after the host updated the first stages (undone and updated again clipped: within 1e-5, the
// host sums the norm's squares in float64), and dropout with one micro-batch (the same masks:
// within 1e-5).
func TestStreamedTechniques(t *testing.T) {
	if testing.Short() {
		t.Skip("trains 4 runs twice")
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
		{"adam8bit-dynamic", func(c *train.Config) {
			c.Optimizer, c.LossScale = optim.Adam8bit().Done(), mixed.NewDynamicLossScale()
		}, 1e-5},
		{"overflow", func(c *train.Config) { c.LossScale = mixed.StaticLossScale(3e38) }, 0},
		{"clip", func(c *train.Config) { c.LossScale, c.ClipNorm = mixed.NewDynamicLossScale(), 1 }, 1e-5},
		{"dropout", func(c *train.Config) {
			c.MicroBatches = 1
			editGPT(c, func(g *models.GPTConfig) { g.Dropout = 0.1 })
		}, 1e-5},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			config := streamConfig(t)
			c.edit(&config)
			whole, want := runOffload(t, embedded(), config, streamSteps, "")
			defer whole.Close()
			config.Offload = train.OffloadParams
			streamed, got := runOffload(t, embedded(), config, streamSteps, "")
			defer streamed.Close()
			sameLosses(t, want, got, c.tol)
			if c.name == "overflow" {
				for i, s := range got.Steps {
					if !s.Skipped {
						t.Errorf("step %d was not skipped", i+1)
					}
				}
				if streamed.GlobalStep() != 0 {
					t.Errorf("%d updates applied, want none", streamed.GlobalStep())
				}
			}
		})
	}
}

// TestStreamedCheckpointsResumeEitherWay: a checkpoint written by a streamed run resumes in a
// whole-step run and the reverse (the same variables, by name), and the resumed runs' losses
// equal an uninterrupted whole run's within 1e-5 relative.
func TestStreamedCheckpointsResumeEitherWay(t *testing.T) {
	config := streamConfig(t)
	config.LossScale = mixed.NewDynamicLossScale()
	straight, want := runOffload(t, embedded(), config, 4, "")
	straight.Close()
	for _, first := range []train.Offload{train.OffloadParams, train.OffloadNone} {
		then := train.OffloadNone
		if first == train.OffloadNone {
			then = train.OffloadParams
		}
		t.Run(fmt.Sprintf("%s-then-%s", first, then), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run")
			c := config
			c.Offload = first
			head, h1 := runOffload(t, embedded(), c, 2, dir)
			head.Close()
			c.Offload = then
			tail, h2 := runOffload(t, embedded(), c, 4, dir)
			tail.Close()
			sameLosses(t, want, &train.History{Steps: append(h1.Steps, h2.Steps...)}, 1e-5)
		})
	}
}

// streamedUpload is the bytes a streamed step of config (a GPT) sends to the device: each stage's
// weights twice but the head's once (its one program computes the loss and its gradients), every
// weight in bfloat16 under a bfloat16 compute policy (the tiny GPT reads each so, the embedding
// table after its gather), and the tokens and targets (int32) for the two passes.
func streamedUpload(config train.Config) int64 {
	gpt := gptOf(config)
	head := int64(4 * (gpt.Hidden*gpt.Vocab + gpt.Vocab + 2*gpt.Hidden)) // post_norm and output_layer
	weights := 2*4*gpt.Params() - head
	if config.Policy.Compute == dtypes.BFloat16 {
		weights /= 2
	}
	return weights + int64(2*4*config.Batch*gpt.SeqLen)
}

// TestStreamedRefuses: a model that does not run as stages, bfloat16 master weights and several
// devices are refused before anything is built, each naming the fix.
func TestStreamedRefuses(t *testing.T) {
	mlp := smallMLP(t)
	mlp.Offload = train.OffloadParams
	bf16, err := mixed.ParsePolicy("params=bfloat16,compute=bfloat16,output=float32")
	if err != nil {
		t.Fatal(err)
	}
	gpt := streamConfig(t)
	gpt.Offload = train.OffloadParams
	halfParams, devices := gpt, gpt
	halfParams.Policy, devices.Devices = bf16, train.Devices{Count: 2}
	for name, c := range map[string]train.Config{"mlp": mlp, "bf16 params": halfParams, "2 devices": devices} {
		if _, err := train.New(embedded(), c); err == nil || !strings.Contains(err.Error(), "Config.Offload params") {
			t.Errorf("%s: %v, want an error about Config.Offload params", name, err)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

// TestStreamedTrainsBeyondTheBudget: on XLA, a GPT whose float32 weights need more than the
// device budget trains streamed within it (each program's memory by XLA's account plus the kept
// buffers, StreamStats.DevicePeakBytes), and a budget below one block's program stops the first
// step with an error naming the stage.
func TestStreamedTrainsBeyondTheBudget(t *testing.T) {
	t.Parallel()
	backend := testkit.RequireXLA(t)
	config := streamConfig(t)
	config.Batch, config.MicroBatches = 4, 2
	editGPT(&config, func(g *models.GPTConfig) { *g = models.Presets["small"]; g.Layers, g.Dropout, g.SeqLen = 12, 0, 64 })
	weights := 4 * gptOf(config).Params()
	config.Offload, config.DeviceBudget = train.OffloadParams, weights/2
	tr, h := runOffload(t, backend, config, 2, "")
	defer tr.Close()
	peak := streamStats(t, h.Offload).DevicePeakBytes
	t.Logf("weights %d bytes, budget %d, largest device footprint %d (%.2fx the weights)", weights, config.DeviceBudget, peak, float64(peak)/float64(weights))
	if peak <= 0 || peak > config.DeviceBudget {
		t.Errorf("largest device footprint %d bytes, want within the budget %d", peak, config.DeviceBudget)
	}
	config.DeviceBudget = peak / 4
	small, err := train.New(backend, config)
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	batches, err := data.NewSyntheticTokens(config.Batch, gptOf(config).SeqLen, gptOf(config).Vocab, 3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := small.Step(batches.Batch(0)); err == nil || !strings.Contains(err.Error(), "device budget") {
		t.Errorf("a budget of %d bytes: %v, want the device budget's error", config.DeviceBudget, err)
	} else {
		t.Log(err)
	}
}

// TestStreamedLlama: the tiny Llama (tied embeddings: the embedding and head stages share the
// table, whose two gradients come back and add up on the host) streams as its whole step trains: float32
// losses within 1e-5 relative over streamSteps on the embedded backend, bfloat16 compute with remat
// of whole blocks within 1e-3 on both backends (not in -short). (Float32 on XLA streams in
// TestStreamedMatchesWholeStep.)
func TestStreamedLlama(t *testing.T) {
	t.Parallel()
	bf16, err := mixed.ParsePolicy("params=float32,compute=bfloat16,output=float32")
	if err != nil {
		t.Fatal(err)
	}
	llama, err := models.NewLlama(models.LlamaPresets["tiny"])
	if err != nil {
		t.Fatal(err)
	}
	for _, backend := range testkit.All() {
		for _, policy := range []mixed.Policy{mixed.Float32, bf16} {
			t.Run(backend.Name()+"/"+policy.String(), func(t *testing.T) {
				config := streamConfig(t)
				config.Model, config.Remat = llama, train.Remat{}
				tol := 1e-5
				if policy == mixed.Float32 && backend != testkit.Embedded() {
					t.Skip("float32 streams on XLA in TestStreamedMatchesWholeStep")
				}
				if policy != mixed.Float32 {
					if testing.Short() {
						t.Skip("bfloat16 runs in the full tests")
					}
					config.Policy, config.Remat, tol = policy, train.Remat{Kinds: []string{"block"}}, 1e-3
				}
				whole, want := runLlama(t, backend, config)
				defer whole.Close()
				config.Offload = train.OffloadParams
				streamed, got := runLlama(t, backend, config)
				defer streamed.Close()
				sameLosses(t, want, got, tol)
				// The tied table's gradient comes back from both stages that use it.
				c := llama.Config
				if stats, want := streamStats(t, streamed.ExecutorStats()), 4*(c.Params()+int64(c.Vocab*c.Hidden)); stats.BytesToHost != want {
					t.Errorf("%d bytes of gradients came back, want %d: the parameters', the tied table's twice", stats.BytesToHost, want)
				}
			})
		}
	}
}

// runLlama trains config's Llama streamSteps steps on synthetic tokens.
func runLlama(t *testing.T, backend backends.Backend, config train.Config) (*train.Trainer, *train.History) {
	t.Helper()
	tr, err := train.New(backend, config)
	if err != nil {
		t.Fatal(err)
	}
	seq, vocab := config.Model.(train.LanguageModel).TokenShape()
	batches, err := data.NewSyntheticTokens(config.Batch, seq, vocab, 3)
	if err != nil {
		t.Fatal(err)
	}
	h, err := tr.Run(batches, train.RunOptions{Steps: streamSteps})
	if err != nil {
		t.Fatal(err)
	}
	return tr, h
}

// TestStreamProgramsFlatInDepth: the streamed step's programs (Trainer.StreamedPrograms) are the
// same graphs for a GPT of 2 blocks and of 6, node for node, where the whole step grows with
// the blocks: what keeps a streamed step's compile time flat in depth. The staged step's
// (Trainer.StagedPrograms) are those stage programs and one device update per kind of stage
// (the embedding, a block, the head), flat in depth too.
func TestStreamProgramsFlatInDepth(t *testing.T) {
	nodes := func(layers int) (stream, staged []int, whole int) {
		config := streamConfig(t)
		editGPT(&config, func(g *models.GPTConfig) { g.Layers = layers })
		config.Offload = train.OffloadParams
		tr, err := train.New(embedded(), config)
		if err != nil {
			t.Fatal(err)
		}
		programs, err := tr.StreamedPrograms()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range programs.All() {
			stream = append(stream, len(p.Graph.Nodes()))
		}
		programs.Finalize()
		stagedPrograms, err := tr.StagedPrograms()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range stagedPrograms.All() {
			staged = append(staged, len(p.Graph.Nodes()))
		}
		stagedPrograms.Finalize()
		config.Offload = train.OffloadNone
		if tr, err = train.New(embedded(), config); err != nil {
			t.Fatal(err)
		}
		p, err := tr.Program()
		if err != nil {
			t.Fatal(err)
		}
		defer p.Graph.Finalize()
		return stream, staged, len(p.Graph.Nodes())
	}
	stream2, staged2, whole2 := nodes(2)
	stream6, staged6, whole6 := nodes(6)
	t.Logf("nodes of the embedding, block and head programs: %v at 2 and 6 blocks; staged with the updates: %v; whole step: %d and %d",
		stream2, staged2, whole2, whole6)
	if len(stream2) != 5 || !slices.Equal(stream2, stream6) {
		t.Errorf("streamed programs' nodes %v at 2 blocks, %v at 6: want 5 programs, the same", stream2, stream6)
	}
	if len(staged2) != 8 || !slices.Equal(staged2, staged6) || !slices.Equal(staged2[:5], stream2) {
		t.Errorf("staged programs' nodes %v at 2 blocks, %v at 6: want the 5 streamed programs %v and 3 updates, the same at both depths",
			staged2, staged6, stream2)
	}
	if whole6 < 2*whole2 {
		t.Errorf("the whole step has %d nodes at 6 blocks, %d at 2: it should grow with the blocks", whole6, whole2)
	}
}

// TestStreamedSmallGPT: the small GPT (4 blocks of 256, sequence 128), float32, 2 micro-batches of
// 2: streamed losses within 1e-5 relative of the whole step's over 10 steps, on XLA (not in
// -short). The embedded backend streams the same programs (TestStreamedMatchesWholeStep, at the
// tiny GPT's shapes); at the small GPT's it took 2 of the package's 7 minutes of CPU.
func TestStreamedSmallGPT(t *testing.T) {
	if testing.Short() {
		t.Skip("trains the small GPT 10 steps twice")
	}
	backend := testkit.RequireXLA(t)
	t.Parallel()
	config := streamConfig(t)
	config.Batch = 4
	editGPT(&config, func(g *models.GPTConfig) { *g = models.Presets["small"]; g.Dropout = 0 })
	whole, want := runOffload(t, backend, config, 10, "")
	defer whole.Close()
	config.Offload = train.OffloadParams
	streamed, got := runOffload(t, backend, config, 10, "")
	defer streamed.Close()
	sameLosses(t, want, got, 1e-5)
}

// streamStats is what a streamed run's executor reported, or fails.
func streamStats(t *testing.T, s train.Stats) *train.StreamStats {
	t.Helper()
	stats, ok := s.(*train.StreamStats)
	if !ok {
		t.Fatalf("the executor reported %#v, want a streamed step's *train.StreamStats", s)
	}
	return stats
}
