package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/onegpu/onegpu/data"
	"github.com/onegpu/onegpu/hf"
	"github.com/onegpu/onegpu/hf/safetensors"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/platform"
)

// hfFixture is the untied Llama fixture of hf/testdata.
var hfFixture = filepath.Join("..", "..", "hf", "testdata", "llama3_untied")

// copyFolder copies the files of from into a new folder to and returns to.
func copyFolder(t *testing.T, from, to string) string {
	t.Helper()
	if err := os.MkdirAll(to, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		raw, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return to
}

// folderBytes returns every file of dir with its bytes.
func folderBytes(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		raw, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		out[e.Name()] = string(raw)
	}
	return out
}

// TestTrainExportChecksBeforeTraining: `train --init-hf BASE --export-hf DIR` refuses, before
// it trains (nothing printed, the folders unchanged): a DIR holding a user's model (naming its
// files and --overwrite), BASE itself (by name, through a link or ".."), the --checkpoint
// folder, a dangling link; BASE's tokenizer.json a folder, a named pipe or a link to /dev/zero
// (copied after training); --export-adapter a folder holding someone's adapter (naming
// --overwrite), --init-adapter's folder or --init-hf's; and --plot a dangling link or a file the
// run reads (BASE's config.json, --init-adapter's weights, the --data file: before, a --plot of
// BASE's config.json replaced it with the loss curve's image).
func TestTrainExportChecksBeforeTraining(t *testing.T) {
	t.Setenv(platform.EnvBackend, "")
	t.Setenv(platform.EnvPlugin, "")
	root := t.TempDir()
	base := copyFolder(t, hfFixture, filepath.Join(root, "base"))
	user := copyFolder(t, filepath.Join("..", "..", "hf", "testdata", "tied_bf16_sharded"), filepath.Join(root, "user"))
	adapter := copyFolder(t, filepath.Join("..", "..", "hf", "testdata", "peft", "llama3_untied_lora"), filepath.Join(root, "adapter"))
	if err := os.Symlink(base, filepath.Join(root, "link")); err != nil {
		t.Skipf("no symbolic links here: %v", err)
	}
	if err := os.Symlink(filepath.Join(root, "nowhere"), filepath.Join(root, "dangling")); err != nil {
		t.Fatal(err)
	}
	withTokenizer := func(name string, make func(path string) error) string {
		dir := copyFolder(t, hfFixture, filepath.Join(root, "base-"+name))
		_ = os.Remove(filepath.Join(dir, "tokenizer.json")) // the fixture's own, replaced
		if err := make(filepath.Join(dir, "tokenizer.json")); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	tokens := filepath.Join(root, "tokens.npy")
	if raw, err := os.ReadFile(filepath.Join("..", "..", "hf", "testdata", "llama3_untied.tokens.npy")); err != nil || os.WriteFile(tokens, raw, 0o644) != nil {
		t.Fatal(err)
	}
	out := filepath.Join(root, "out")
	train := func(init, export string, more ...string) []string {
		return append([]string{"--init-hf", init, "--steps", "1", "--batch", "1", "--microbatches", "1", "--seq", "8", "--export-hf", export}, more...)
	}
	cases := []struct {
		args []string
		want string
	}{
		{train(base, user), "--export-hf " + user + " holds files onegpu did not export (config.json, generation_config.json, model-00001-of-00003.safetensors"},
		{train(base, user), "give --overwrite to replace them"},
		{train(base, base), "--export-hf " + base + " is the folder of --init-hf " + base},
		{train(base, base, "--overwrite"), "is the folder of --init-hf"},
		{train(base, filepath.Join(root, "link")), "is the folder of --init-hf"},
		{train(base, filepath.Join(root, "user", "..", "base")), "is the folder of --init-hf"},
		{train(base, out, "--checkpoint", out), "--export-hf " + out + " is the --checkpoint folder"},
		{train(base, filepath.Join(root, "dangling")), "dangling is a symbolic link to " + filepath.Join(root, "nowhere") + ", which does not exist"},
		{train(withTokenizer("folder", func(p string) error { return os.Mkdir(p, 0o755) }), out), "tokenizer.json is a folder, not a regular file"},
		{train(base, out, "--plot", filepath.Join(root, "dangling")), "--plot " + filepath.Join(root, "dangling") + ": " + filepath.Join(root, "dangling") + " is a symbolic link to"},
		{train(base, out, "--plot", filepath.Join(base, "config.json")), "--plot " + filepath.Join(base, "config.json") + " is a file of --init-hf " + base + ", which the run reads"},
		{[]string{"--init-hf", base, "--steps", "1", "--init-adapter", adapter, "--plot", filepath.Join(adapter, "adapter_model.safetensors")}, "is a file of --init-adapter " + adapter},
		{[]string{"--init-hf", base, "--steps", "1", "--seq", "8", "--data", tokens, "--plot", tokens}, "--plot " + tokens + " is --data " + tokens + ", which the run reads"},
		{[]string{"--overwrite"}, "--overwrite does not apply: it needs --checkpoint DIR, --export-hf DIR or --export-adapter DIR"},
		{[]string{"--init-hf", base, "--steps", "1", "--lora", "rank=2", "--export-adapter", adapter}, "--export-adapter " + adapter + " holds files onegpu did not export (adapter_config.json, adapter_model.safetensors"},
		{[]string{"--init-hf", base, "--steps", "1", "--init-adapter", adapter, "--export-adapter", adapter, "--overwrite"}, "--export-adapter " + adapter + " is the folder of --init-adapter " + adapter},
		{[]string{"--init-hf", base, "--steps", "1", "--lora", "rank=2", "--export-adapter", base, "--overwrite"}, "--export-adapter " + base + " is the folder of --init-hf " + base},
	}
	if runtime.GOOS != "windows" {
		cases = append(cases,
			struct {
				args []string
				want string
			}{train(withTokenizer("fifo", testkit.MakeFIFO), out), "tokenizer.json is a named pipe, not a regular file"},
			struct {
				args []string
				want string
			}{train(withTokenizer("zero", func(p string) error { return os.Symlink("/dev/zero", p) }), out), "tokenizer.json is a symbolic link to /dev/zero, which is a device"})
	}
	userBefore, baseBefore, adapterBefore := folderBytes(t, user), folderBytes(t, base), folderBytes(t, adapter)
	tokensBefore := folderBytes(t, root)["tokens.npy"]
	for _, c := range cases {
		trainRefuses(t, c.args, c.want)
	}
	if !maps.Equal(folderBytes(t, user), userBefore) || !maps.Equal(folderBytes(t, base), baseBefore) || !maps.Equal(folderBytes(t, adapter), adapterBefore) ||
		folderBytes(t, root)["tokens.npy"] != tokensBefore {
		t.Errorf("a refused run changed the folders")
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a refused run created %s", out)
	}
}

// TestHFRunsCheckTheConfigFirst: a config.json asking for 10^9 layers of a 2-layer folder is
// refused by eval --hf and by train --init-hf (with --offload params too) from the weights'
// headers, at once (before: eval died of Go's "out of memory", train --offload params grew its
// memory for 90 s); a real 300-layer Llama, whose step cannot be unrolled even with one
// micro-batch, is told to run streamed instead of "use at most 0 micro-batches".
func TestHFRunsCheckTheConfigFirst(t *testing.T) {
	t.Setenv(platform.EnvBackend, "")
	t.Setenv(platform.EnvPlugin, "")
	root := t.TempDir()
	absurd := copyFolder(t, hfFixture, filepath.Join(root, "absurd"))
	raw, err := os.ReadFile(filepath.Join(absurd, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	config := strings.Replace(string(raw), `"num_hidden_layers": 2`, `"num_hidden_layers": 1000000000`, 1)
	if err := os.WriteFile(filepath.Join(absurd, "config.json"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(root, "tokens.npy")
	if err := data.WriteNPYFile(tokens, tensors.FromFlatDataAndDimensions([]int32{1, 2, 3, 4, 5, 6, 7, 8, 9}, 1, 9)); err != nil {
		t.Fatal(err)
	}
	deep := filepath.Join(root, "deep")
	c := models.LlamaConfig{Vocab: 16, Hidden: 8, Intermediate: 8, Layers: 300, Heads: 2, KVHeads: 1, HeadDim: 4, SeqLen: 16, MaxPositions: 16,
		RopeTheta: 10000, NormEpsilon: 1e-5}
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	layout, err := hf.Describe(models.Llama{Config: c})
	if err != nil {
		t.Fatal(err)
	}
	var weights []safetensors.Tensor
	for _, spec := range layout.Tensors() {
		n := 4
		for _, d := range spec.Shape {
			n *= d
		}
		weights = append(weights, safetensors.Tensor{Name: spec.Name, DType: safetensors.F32, Shape: spec.Shape,
			Data: func(w io.Writer) error { _, err := w.Write(make([]byte, n)); return err }})
	}
	if err := safetensors.WriteFile(filepath.Join(deep, "model.safetensors"), weights, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	deepConfig := `{"model_type": "llama", "vocab_size": 16, "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 300,
		"num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4, "max_position_embeddings": 16}`
	if err := os.WriteFile(filepath.Join(deep, "config.json"), []byte(deepConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	const absurdWant = "config.json describes 1000000000 layers, 36992000032832 parameters; the weights hold 2 layers"
	for _, c := range []struct {
		run  func([]string, io.Writer) error
		args []string
		want string
	}{
		{runEval, []string{"--hf", absurd, "--tokens", tokens}, absurdWant},
		{runTrain, []string{"--init-hf", absurd, "--steps", "1"}, "--init-hf: checkpoint " + absurd + " does not fit the model"},
		{runTrain, []string{"--init-hf", absurd, "--steps", "1", "--offload", "params"}, absurdWant},
		{runTrain, []string{"--init-hf", deep, "--steps", "1", "--batch", "1", "--microbatches", "1"},
			"300 layers: even one micro-batch unrolls more than the 256 blocks onegpu builds (GoMLX v0.26 has no loops): run the model streamed, one layer at a time, with --offload params"},
	} {
		done := make(chan error, 1)
		var out bytes.Buffer
		go func() { done <- c.run(c.args, &out) }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%v: %v, want an error containing %q", c.args, err, c.want)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%v: no answer in 20 s", c.args)
		}
	}
}

// TestTrainRefusesParametersBeyondMemory: a model whose parameters alone exceed this machine's
// available memory (Llama 3.1 8B in float32: 29.9 GiB) is refused from its config's count, before
// its step is built: the message is the count's, not the step estimate's (before: 45 s building
// the step to find it 150 GiB).
func TestTrainRefusesParametersBeyondMemory(t *testing.T) {
	t.Setenv(platform.EnvBackend, "")
	t.Setenv(platform.EnvPlugin, "")
	available, ok := availableRAM()
	if !ok || available >= 8_030_261_248*4 {
		t.Skipf("this machine has %d bytes available (known: %v): Llama 3.1 8B's float32 weights fit", available, ok)
	}
	err := runTrain([]string{"--model", "llama", "--preset", "llama-3.1-8b", "--steps", "1"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "the model's 8,030,261,248 parameters alone need 29.9 GiB in float32, this machine has") {
		t.Errorf("train llama-3.1-8b: %v", err)
	}
}

// TestMistralWindowBoundsTheSequence: the Mistral fixture (sliding window 24, 128 positions)
// evaluates sequences of 25 tokens (24 predicted: TestEvalMatchesTransformers compares them with
// transformers), and refuses 26 tokens in eval (naming sliding_window) and --seq 25 in train.
func TestMistralWindowBoundsTheSequence(t *testing.T) {
	t.Setenv(platform.EnvBackend, "")
	t.Setenv(platform.EnvPlugin, "")
	fixture := filepath.Join("..", "..", "hf", "testdata", "mistral_window")
	ids := func(n int) string {
		path := filepath.Join(t.TempDir(), "ids.npy")
		values := make([]int32, n)
		for i := range values {
			values[i] = int32(i)
		}
		if err := data.WriteNPYFile(path, tensors.FromFlatDataAndDimensions(values, 1, n)); err != nil {
			t.Fatal(err)
		}
		return path
	}
	if err := runEval([]string{"--hf", fixture, "--tokens", ids(25)}, &bytes.Buffer{}); err != nil {
		t.Errorf("eval on sequences within the window: %v", err)
	}
	const want = "sliding_window: 24 is shorter than the sequences of 25 tokens asked for"
	if err := runEval([]string{"--hf", fixture, "--tokens", ids(26)}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("eval on sequences past the window: %v", err)
	}
	if err := runTrain([]string{"--init-hf", fixture, "--seq", "25", "--steps", "1"}, &bytes.Buffer{}); err == nil ||
		!strings.Contains(err.Error(), "--seq 25: Llama config: SeqLen = 25 exceeds SlidingWindow = 24") {
		t.Errorf("train --seq past the window: %v", err)
	}
}

// TestEvalJSONWritesANaNLoss: eval --json of a checkpoint whose final norm is NaN prints its
// report with the loss "NaN", as train's history writes one, and reads back as NaN (before: exit
// 1 with "json: unsupported value: NaN" and nothing printed).
func TestEvalJSONWritesANaNLoss(t *testing.T) {
	t.Setenv(platform.EnvBackend, "")
	t.Setenv(platform.EnvPlugin, "")
	dir := copyFolder(t, hfFixture, filepath.Join(t.TempDir(), "nan"))
	path := filepath.Join(dir, "model.safetensors")
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	norm, _ := f.Tensor("model.norm.weight")
	raw, err := os.ReadFile(path)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	dataStart := 8 + int64(binary.LittleEndian.Uint64(raw))
	for i := dataStart + norm.Begin; i < dataStart+norm.End; i += 4 {
		binary.LittleEndian.PutUint32(raw[i:], math.Float32bits(float32(math.NaN())))
	}
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := runEval([]string{"--hf", dir, "--tokens", filepath.Join("..", "..", "hf", "testdata", "llama3_untied.tokens.npy"), "--json"}, &out); err != nil {
		t.Fatalf("eval --json: %v\n%s", err, out.String())
	}
	var r evalReport
	if err := json.Unmarshal(out.Bytes(), &r); err != nil || !math.IsNaN(r.Loss) || r.Tokens != 46 || !strings.Contains(out.String(), `"loss": "NaN"`) {
		t.Errorf("eval --json: %v, %+v\n%s", err, r, out.String())
	}
}
