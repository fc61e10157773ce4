package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/data"
	"github.com/onegpu/onegpu/hf"
	"github.com/onegpu/onegpu/internal/panics"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/platform"
	"github.com/onegpu/onegpu/train"
)

func init() {
	register(command{
		name:    "eval",
		summary: "the mean next-token cross-entropy of a Hugging Face checkpoint (Llama, Qwen2) on token ids (.npy)",
		run:     func(args []string) error { return runEval(args, os.Stdout) },
	})
}

// evalReport is what `onegpu eval` prints: the mean cross-entropy of predicting each token of the
// file's sequences from the ones before it, and the number of tokens predicted.
type evalReport struct {
	Loss    float64 `json:"loss"`
	Tokens  int64   `json:"tokens"`
	Model   string  `json:"model"`
	Policy  string  `json:"policy"`
	Backend string  `json:"backend"`
	// Attention and CrossEntropy are how the loss was computed (--attention, --cross-entropy).
	Attention    string `json:"attention"`
	CrossEntropy string `json:"cross_entropy"`
	// Adapter is the PEFT adapter folder applied (--adapter), and its LoRA.
	Adapter string `json:"adapter,omitempty"`
	LoRA    string `json:"lora,omitempty"`
}

// MarshalJSON writes the report with a loss that is not finite (a diverged model's) as the train
// history writes one: the string "NaN", "+Inf" or "-Inf".
func (r evalReport) MarshalJSON() ([]byte, error) {
	type plain evalReport
	return json.Marshal(struct {
		plain
		Loss train.JSONFloat `json:"loss"`
	}{plain(r), train.JSONFloat(r.Loss)})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (r *evalReport) UnmarshalJSON(data []byte) error {
	type plain evalReport
	var raw struct {
		plain
		Loss train.JSONFloat `json:"loss"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	*r = evalReport(raw.plain)
	r.Loss = float64(raw.Loss)
	return nil
}

func runEval(args []string, w io.Writer) (err error) {
	defer inFlags(&err)
	fs := newFlagSet("eval", "--hf DIR --tokens FILE.npy [--adapter DIR [--quantize-base nf4|int8]] [--policy S] [--batch N] [--attention A] [--cross-entropy C] [--backend SPEC] [--json]")
	dir := fs.String("hf", "", "Hugging Face checkpoint folder: config.json and model.safetensors (or shards with their index) of a Llama or a Qwen2")
	var adapter adapterOnBase
	adapter.register(fs)
	tokensFile := fs.String("tokens", "", ".npy of token ids [sequences, length], int32 or int64; each sequence's tokens after the first are predicted")
	policyText := fs.String("policy", "float32", `precision policy, jmp's grammar: "float32", "params=float32,compute=bfloat16,output=float32", "bf16", ...`)
	batch := fs.Int("batch", 8, "sequences per evaluated batch, at least 1")
	backendText := fs.String("backend", "", `backend: "go" (embedded, default) or "xla:/abs/path/plugin.so"; default from $GOMLX_BACKEND or $ONEGPU_PJRT_PLUGIN`)
	asJSON := fs.Bool("json", false, `print {"loss": ..., "tokens": N, ...} as one JSON object (a loss that is not finite as the string "NaN", "+Inf" or "-Inf")`)
	var attentionText, crossEntropyText string
	chunkingFlags(fs, &attentionText, &crossEntropyText)
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if *dir == "" || *tokensFile == "" {
		return fmt.Errorf("eval needs --hf DIR (a Hugging Face checkpoint) and --tokens FILE.npy (token ids [sequences, length])")
	}
	if *batch < 1 {
		return fmt.Errorf("--batch %d: evaluate at least 1 sequence at a time", *batch)
	}
	if err := adapter.check(); err != nil {
		return err
	}
	policy, err := mixed.ParsePolicy(*policyText)
	if err != nil {
		return fmt.Errorf("--policy: %w", err)
	}
	attention, crossEntropy, err := parseChunking(attentionText, crossEntropyText)
	if err != nil {
		return err
	}
	// config.json first (the vocabulary the ids must fit, the positions they may fill), then the
	// weights: a bad token file is refused before a large model is read.
	layout, err := hf.ReadConfig(*dir, 0)
	if err != nil {
		return err
	}
	// The weights' headers against the config, before anything of the config's size is built.
	if err := hf.CheckWeights(*dir, layout); err != nil {
		return err
	}
	lm, ok := layout.Model().(train.LanguageModel)
	if !ok {
		return fmt.Errorf("--hf %s holds %v, not a language model", *dir, layout.Model())
	}
	_, vocab := lm.TokenShape()
	ids, err := data.ReadTokens(*tokensFile, 1, 1, vocab, 0)
	if err != nil {
		return err
	}
	spec, err := platform.ResolveBackend(*backendText)
	if err != nil {
		return err
	}
	backend, err := platform.NewBackend(spec.String())
	if err != nil {
		return err
	}
	defer backend.Finalize()
	if err := policy.Validate(backend); err != nil {
		return err
	}
	options, err := adapter.options(policy.Param, ids.Length()-1)
	if err != nil {
		return err
	}
	p, err := hf.OpenWith(context.New(), *dir, options)
	if err != nil {
		return fmt.Errorf("--tokens %s: sequences of %d tokens: %w", *tokensFile, ids.Length(), err)
	}
	m := p.Model.(train.Model)
	settings := train.Settings{Policy: policy, Attention: attention, CrossEntropy: crossEntropy}
	if settings.LoRA, err = adapter.apply(p, policy.Param, options); err != nil {
		return err
	}
	// p.Ctx is in Reuse mode: a variable the folder lacks is an error, not a fresh random weight.
	exec, err := context.NewExec(backend, p.Ctx, func(ctx *context.Context, tokens, labels *graph.Node) []*graph.Node {
		settings.Apply(ctx, tokens.Graph())
		loss, _ := m.Loss(ctx, []*graph.Node{tokens, labels})
		return []*graph.Node{loss.Sum, loss.Count}
	})
	if err != nil {
		return err
	}
	defer exec.Finalize()
	var sum, count float64
	for from := 0; from < ids.Rows(); from += *batch {
		var outs []*tensors.Tensor
		if err := panics.Catch(func() {
			in := ids.Sequences(from, min(from+*batch, ids.Rows()))
			var err error
			if outs, err = exec.Exec(in[0], in[1]); err != nil {
				panic(err)
			}
		}); err != nil {
			return fmt.Errorf("evaluating sequences %d to %d: %w", from, min(from+*batch, ids.Rows())-1, err)
		}
		sum += float64(tensors.MustCopyFlatData[float32](outs[0])[0])
		count += float64(tensors.MustCopyFlatData[float32](outs[1])[0])
	}
	r := evalReport{Loss: sum / count, Tokens: int64(count), Model: fmt.Sprint(m), Policy: policy.String(), Backend: spec.String(),
		Attention: attention.String(), CrossEntropy: crossEntropy.String(), Adapter: adapter.dir, LoRA: settings.LoRA.String()}
	if *asJSON {
		return writeJSON(w, r)
	}
	fmt.Fprintf(w, "loss %.6f over %d tokens (%d sequences of %s)\nmodel %s\npolicy %s, attention %s, cross-entropy %s, backend %s\n",
		r.Loss, r.Tokens, ids.Rows(), *tokensFile, r.Model, r.Policy, r.Attention, r.CrossEntropy, r.Backend)
	if r.Adapter != "" {
		fmt.Fprintf(w, "adapter %s (LoRA %s)\n", r.Adapter, r.LoRA)
	}
	return nil
}
