package testkit

import (
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/onegpu/onegpu/hf/safetensors"
)

// HFFixture is a committed tiny random model of a Hugging Face family saved by transformers
// (reference/hf/make_fixture.py, in hf/testdata), with its tokens [Batch, Seq] and transformers'
// float32 logits for them.
type HFFixture struct {
	Dir        string // the checkpoint folder
	Tokens     []int64
	Batch, Seq int
	Logits     []float32 // [Batch, Seq, vocab]
}

// hfTestdata is the folder of the committed fixtures, hf/testdata.
func hfTestdata() string {
	_, here, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(here), "..", "..", "hf", "testdata")
}

// HFFixtureNames lists the committed fixtures (each folder of hf/testdata with a
// NAME.logits.safetensors beside it), sorted: a test over all of them covers a fixture added
// later (a model family's) without a change.
func HFFixtureNames(t testing.TB) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(hfTestdata(), "*.logits.safetensors"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no fixtures in %s: %v", hfTestdata(), err)
	}
	var names []string
	for _, p := range paths {
		names = append(names, strings.TrimSuffix(filepath.Base(p), ".logits.safetensors"))
	}
	sort.Strings(names)
	return names
}

// ReadHFFixture reads hf/testdata/NAME and NAME.logits.safetensors, from any package's tests.
func ReadHFFixture(t testing.TB, name string) HFFixture {
	t.Helper()
	dir := filepath.Join(hfTestdata(), name)
	f, err := safetensors.Open(dir + ".logits.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	info, _ := f.Tensor("tokens")
	raw, err := f.ReadTensor("tokens")
	if err != nil || info.DType != safetensors.I64 || len(info.Shape) != 2 {
		t.Fatalf("tokens %+v: %v", info, err)
	}
	r := HFFixture{Dir: dir, Batch: int(info.Shape[0]), Seq: int(info.Shape[1])}
	for i := 0; i < len(raw); i += 8 {
		r.Tokens = append(r.Tokens, int64(binary.LittleEndian.Uint64(raw[i:])))
	}
	if raw, err = f.ReadTensor("logits"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(raw); i += 4 {
		r.Logits = append(r.Logits, math.Float32frombits(binary.LittleEndian.Uint32(raw[i:])))
	}
	return r
}

// CrossEntropy is the mean next-token cross-entropy of the fixture's tokens under transformers'
// logits, in float64 (position j's logits predict token j+1), and the number of tokens predicted.
func (r HFFixture) CrossEntropy() (loss float64, tokens int) {
	vocab := len(r.Logits) / len(r.Tokens)
	for b := range r.Batch {
		for j := range r.Seq - 1 {
			row := r.Logits[(b*r.Seq+j)*vocab : (b*r.Seq+j+1)*vocab]
			top := math.Inf(-1)
			for _, v := range row {
				top = math.Max(top, float64(v))
			}
			sum := 0.0
			for _, v := range row {
				sum += math.Exp(float64(v) - top)
			}
			loss += math.Log(sum) + top - float64(row[r.Tokens[b*r.Seq+j+1]])
			tokens++
		}
	}
	return loss / float64(tokens), tokens
}

// NextTokens are the fixture's tokens as a language model's batch: inputs, each sequence without
// its last token, and labels, without its first, [Batch, Seq-1] int32.
func (r HFFixture) NextTokens() (inputs, labels []int32) {
	for b := range r.Batch {
		for j := range r.Seq - 1 {
			inputs = append(inputs, int32(r.Tokens[b*r.Seq+j]))
			labels = append(labels, int32(r.Tokens[b*r.Seq+j+1]))
		}
	}
	return inputs, labels
}

// HFGreedyCase is one prompt of a fixture and transformers' greedy continuation of it
// (generate(do_sample=False) in float32): at most MaxNewTokens tokens, ending at one of
// StopTokens (none: exactly MaxNewTokens). The text fixture's case also has the prompt's text
// (Prompt is its tokenizer's encoding) and the continuation's (special tokens skipped).
type HFGreedyCase struct {
	Prompt       []int32 `json:"prompt"`
	MaxNewTokens int     `json:"max_new_tokens"`
	StopTokens   []int32 `json:"stop_tokens"`
	Tokens       []int32 `json:"tokens"`
	PromptText   string  `json:"prompt_text"`
	Text         string  `json:"text"`
}

// HFGreedy is NAME.greedy.json: transformers' greedy continuations of a fixture's prompts, and of
// a text prompt when the fixture has a tokenizer (Text is nil otherwise).
type HFGreedy struct {
	Transformers string         `json:"transformers"`
	Cases        []HFGreedyCase `json:"cases"`
	Text         *HFGreedyCase  `json:"text"`
}

// ReadHFGreedy reads hf/testdata/NAME.greedy.json.
func ReadHFGreedy(t testing.TB, name string) HFGreedy {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(hfTestdata(), name+".greedy.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g HFGreedy
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatalf("%s.greedy.json: %v", name, err)
	}
	if len(g.Cases) == 0 {
		t.Fatalf("%s.greedy.json holds no cases", name)
	}
	return g
}

// RandomTensor is a tensor WriteRandomHF writes: its Hugging Face name and shape.
type RandomTensor struct {
	Name  string
	Shape []int
}

// WriteRandomHF writes a Hugging Face folder of random weights into dir: model.safetensors with
// the tensors in bfloat16 (values ±[2^-7, 2^-6), from a fixed seed), streamed so that no tensor is
// ever in memory whole, and config (the model's config.json fields, such as hf.Layout.Config's).
// Benchmarks make their larger-than-fixture checkpoints with it (a few hundred MB, never
// committed).
func WriteRandomHF(tb testing.TB, dir string, tensors []RandomTensor, config map[string]any) {
	tb.Helper()
	r := rand.New(rand.NewPCG(1, 1))
	var ts []safetensors.Tensor
	for _, spec := range tensors {
		n := 1
		for _, d := range spec.Shape {
			n *= d
		}
		ts = append(ts, safetensors.Tensor{Name: spec.Name, DType: safetensors.BF16, Shape: spec.Shape, Data: func(w io.Writer) error {
			buf := make([]byte, 2*1024)
			for left := n; left > 0; left -= len(buf) / 2 {
				k := min(left, len(buf)/2)
				for i := range k {
					binary.LittleEndian.PutUint16(buf[2*i:], uint16(r.IntN(2)<<15|0x3c00|r.IntN(0x100))) // ±[2^-7, 2^-6)
				}
				if _, err := w.Write(buf[:2*k]); err != nil {
					return err
				}
			}
			return nil
		}})
	}
	if err := safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), ts, map[string]string{"format": "pt"}); err != nil {
		tb.Fatal(err)
	}
	raw, err := json.Marshal(config)
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644); err != nil {
		tb.Fatal(err)
	}
}
