package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/hf"
	"github.com/onegpu/onegpu/infer"
	"github.com/onegpu/onegpu/internal/regularfile"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/platform"
	"github.com/onegpu/onegpu/tokenizer"
	"github.com/onegpu/onegpu/train"
)

func init() {
	register(command{
		name:    "generate",
		summary: "text from a Hugging Face folder or a checkpoint: a KV cache, greedy or sampled, streamed as it comes",
		run:     func(args []string) error { return runGenerate(args, os.Stdout, os.Stderr) },
	})
}

// generateReport is what `onegpu generate --json` prints.
type generateReport struct {
	PromptIDs []int32 `json:"prompt_ids"`
	IDs       []int32 `json:"ids"`
	// Text is the generated tokens' text (special tokens left out); absent without a tokenizer.
	Text *string `json:"text,omitempty"`
	// Stopped says an end token (the tokenizer's EOS) ended the generation, not --max-new-tokens.
	Stopped         bool    `json:"stopped"`
	TokensPerSecond float64 `json:"tokens_per_second"`
	CompileSeconds  float64 `json:"compile_seconds"`
	PrefillSeconds  float64 `json:"prefill_seconds"`
	DecodeSeconds   float64 `json:"decode_seconds"`
	Cache           bool    `json:"kv_cache"`
	CacheLength     int     `json:"kv_cache_length,omitempty"`
	Temperature     float64 `json:"temperature"`
	TopK            int     `json:"top_k"`
	TopP            float64 `json:"top_p"`
	Seed            uint64  `json:"seed"`
	Model           string  `json:"model"`
	Policy          string  `json:"policy"`
	Backend         string  `json:"backend"`
}

// generateFlags are `onegpu generate`'s flags.
type generateFlags struct {
	hfDir, checkpoint, tokenizer        string
	prompt, promptFile, promptIDs       string
	maxNew, topK                        int
	temperature, topP                   float64
	seed                                uint64
	special, ignoreEOS, noCache, asJSON bool
	policy, backend                     string
	adapter                             adapterOnBase
	set                                 map[string]bool
}

func runGenerate(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("generate", "--hf DIR | --checkpoint DIR  --prompt TEXT | --prompt-file FILE | --prompt-ids IDS  "+
		"[--adapter DIR [--quantize-base nf4|int8]] [--max-new-tokens N] [--temperature T [--top-k K] [--top-p P] [--seed S]] [--tokenizer DIR] [--no-cache] [--json]")
	var f generateFlags
	fs.StringVar(&f.hfDir, "hf", "", "Hugging Face folder: config.json and model.safetensors (or shards) of a Llama, Qwen2 or Mistral")
	fs.StringVar(&f.checkpoint, "checkpoint", "", "a checkpoint folder onegpu train wrote (its newest whole checkpoint; the model and policy from its manifest)")
	fs.StringVar(&f.prompt, "prompt", "", "the text to continue, encoded by the tokenizer (its template's BOS first, see --special)")
	fs.StringVar(&f.promptFile, "prompt-file", "", "read the prompt's text from this file, as it is (a final line break included)")
	fs.StringVar(&f.promptIDs, "prompt-ids", "", "the prompt as token ids: numbers separated by spaces or commas, or a JSON array (no tokenizer needed)")
	fs.IntVar(&f.maxNew, "max-new-tokens", 64, "the most tokens to generate; the prompt and they together fit in the model's positions")
	fs.Float64Var(&f.temperature, "temperature", 0, "0: greedy (the most likely token); above 0: sample from softmax(logits / temperature)")
	fs.IntVar(&f.topK, "top-k", 0, "with --temperature: sample among the k most likely tokens (0: all)")
	fs.Float64Var(&f.topP, "top-p", 1, "with --temperature: sample among the most likely tokens whose probabilities reach p (1: all)")
	fs.Uint64Var(&f.seed, "seed", 0, "with --temperature: the seed of the draws; the same seed gives the same text (default: a random one, printed)")
	fs.StringVar(&f.tokenizer, "tokenizer", "", "Hugging Face tokenizer: a folder with tokenizer.json, or the file (default: the model's folder)")
	fs.BoolVar(&f.special, "special", true, "add the tokenizer's special tokens around the prompt (its template's BOS, as add_special_tokens=True)")
	fs.BoolVar(&f.ignoreEOS, "ignore-eos", false, "generate --max-new-tokens tokens, past the tokenizer's end tokens (for timing)")
	fs.BoolVar(&f.noCache, "no-cache", false, "recompute the whole sequence for every token instead of reading a KV cache (the baseline the cache is measured against)")
	fs.StringVar(&f.policy, "policy", "float32", `with --hf: precision policy, jmp's grammar: "float32", "bf16", "params=float32,compute=bfloat16,output=float32"; a checkpoint computes under its run's`)
	f.adapter.register(fs)
	fs.StringVar(&f.backend, "backend", "", `backend: "go" (embedded, default) or "xla:/abs/path/plugin.so"; default from $GOMLX_BACKEND or $ONEGPU_PJRT_PLUGIN`)
	fs.BoolVar(&f.asJSON, "json", false, `print {"prompt_ids": [...], "ids": [...], "text": ..., "tokens_per_second": ...} as one JSON object instead of the text as it comes`)
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	f.set = given(fs)
	return f.run(stdout, stderr)
}

// check refuses flags that do not go together, before anything is read.
func (f *generateFlags) check() error {
	switch {
	case (f.hfDir == "") == (f.checkpoint == ""):
		return errors.New("generate needs one model: --hf DIR (a Hugging Face folder) or --checkpoint DIR (onegpu's)")
	case f.set["seed"] && f.temperature == 0:
		return errors.New("--seed seeds the draws of sampling, and greedy decoding (--temperature 0) draws nothing: give --temperature above 0")
	case f.set["policy"] && f.checkpoint != "":
		return errors.New("--policy is for --hf: a checkpoint computes under its run's policy, from its manifest")
	case f.adapter.dir != "" && f.checkpoint != "":
		return errors.New("--adapter applies to --hf's model: give the adapter's base with --hf DIR")
	}
	if err := f.adapter.check(); err != nil {
		return err
	}
	given := 0
	for _, name := range []string{"prompt", "prompt-file", "prompt-ids"} {
		if f.set[name] {
			given++
		}
	}
	if given != 1 {
		return errors.New("generate needs one prompt: --prompt TEXT, --prompt-file FILE or --prompt-ids IDS")
	}
	return nil
}

// sampling is the flags' Sampling, a random seed when sampling without --seed.
func (f *generateFlags) sampling() infer.Sampling {
	s := infer.Sampling{Temperature: f.temperature, TopK: f.topK, TopP: f.topP, Seed: f.seed}
	if s.TopP == 1 {
		s.TopP = 0 // all
	}
	if !s.Greedy() && !f.set["seed"] {
		s.Seed = rand.Uint64()
	}
	return s
}

// flagWords says infer's errors in the CLI's words: the flags that set the fields they name.
var flagWords = strings.NewReplacer(
	"Options.Sampling.Temperature = ", "--temperature ", "Sampling.Temperature = ", "--temperature ", "Sampling.Temperature", "--temperature",
	"Options.Sampling.TopK = ", "--top-k ", "Sampling.TopK = ", "--top-k ",
	"Options.Sampling.TopP = ", "--top-p ", "Sampling.TopP = ", "--top-p ",
	"Options.MaxNewTokens = ", "--max-new-tokens ", "Options.StopTokens holds", "the tokenizer's end tokens (--tokenizer) hold",
	"generate: ", "")

func (f *generateFlags) run(stdout, stderr io.Writer) error {
	if err := f.check(); err != nil {
		return err
	}
	sampling := f.sampling()
	if err := sampling.Validate(); err != nil {
		return errors.New(flagWords.Replace(err.Error()))
	}
	if f.maxNew < 1 {
		return fmt.Errorf("--max-new-tokens %d: generate at least 1 token", f.maxNew)
	}
	modelDir := f.hfDir + f.checkpoint
	tok, err := f.loadTokenizer(modelDir)
	if err != nil {
		return err
	}
	prompt, err := f.promptTokens(tok)
	if err != nil {
		return err
	}
	o := infer.Options{MaxNewTokens: f.maxNew, Sampling: sampling, NoCache: f.noCache}
	if tok != nil && !f.ignoreEOS {
		o.StopTokens = infer.IDs(tok.EOSTokens())
	}
	spec, err := platform.ResolveBackend(f.backend)
	if err != nil {
		return err
	}
	backend, err := platform.NewBackend(spec.String())
	if err != nil {
		return err
	}
	defer backend.Finalize()
	g, policy, err := f.openModel(backend, prompt, o)
	if err != nil {
		return err
	}
	defer g.Close()

	var stream *infer.TextStream
	switch {
	case f.asJSON:
	case tok != nil:
		stream = infer.NewTextStream(stdout, tok, prompt)
		o.OnToken = stream.Add
	default:
		o.OnToken = func(id int32) error { _, err := fmt.Fprintf(stdout, "%d ", id); return err }
	}
	r, err := g.Generate(prompt, o)
	if err != nil {
		return errors.New(flagWords.Replace(err.Error()))
	}
	report := generateReport{PromptIDs: prompt, IDs: r.Tokens, Stopped: r.Stopped, TokensPerSecond: r.TokensPerSecond(),
		CompileSeconds: r.Compile.Seconds(), PrefillSeconds: r.Prefill.Seconds(), DecodeSeconds: r.Decode.Seconds(),
		Cache: r.Cached, CacheLength: r.CacheLength, Temperature: sampling.Temperature, TopK: sampling.TopK, TopP: f.topP,
		Seed: sampling.Seed, Model: fmt.Sprint(g.Model), Policy: policy.String(), Backend: spec.String()}
	if f.asJSON {
		if tok != nil {
			text := infer.NewTextStream(io.Discard, tok, prompt)
			for _, id := range r.Tokens {
				text.Add(id)
			}
			s := text.Text()
			report.Text = &s
		}
		return writeJSON(stdout, report)
	}
	if stream != nil {
		if err := stream.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(stdout)
	f.summary(stderr, report, tok)
	return nil
}

// summary prints the generation's figures: tokens/s, what ended it, the cache, the sampling.
func (f *generateFlags) summary(w io.Writer, r generateReport, tok *tokenizer.Tokenizer) {
	cache := "no KV cache (--no-cache)"
	if r.Cache {
		cache = fmt.Sprintf("a KV cache of %d positions", r.CacheLength)
	} else if !f.noCache {
		cache = "no KV cache (the model has none)"
	}
	how := "greedy"
	if r.Temperature > 0 {
		how = fmt.Sprintf("sampled at temperature %g, top-k %d, top-p %g, seed %d", r.Temperature, r.TopK, r.TopP, r.Seed)
	}
	ended := fmt.Sprintf("ended at --max-new-tokens %d", f.maxNew)
	if r.Stopped {
		name, _ := tok.Token(int(r.IDs[len(r.IDs)-1]))
		ended = "ended by the end token " + name
	}
	fmt.Fprintf(w, "onegpu generate: %d tokens at %.1f tokens/s after the first; prompt of %d tokens read in %.3f s; compiled in %.2f s; %s; %s; %s\n",
		len(r.IDs), r.TokensPerSecond, len(r.PromptIDs), r.PrefillSeconds, r.CompileSeconds, cache, how, ended)
	if tok == nil {
		fmt.Fprintf(w, "onegpu generate: no tokenizer (none in %s; --tokenizer DIR names one): token ids printed, no end tokens known\n", f.hfDir+f.checkpoint)
	}
}

// loadTokenizer returns --tokenizer's tokenizer, or the model folder's, or nil when neither is
// given nor there and the prompt is ids; a text prompt without a tokenizer is an error.
func (f *generateFlags) loadTokenizer(modelDir string) (*tokenizer.Tokenizer, error) {
	text := !f.set["prompt-ids"]
	if f.tokenizer != "" {
		tok, err := tokenizer.Load(f.tokenizer)
		if err != nil {
			return nil, fmt.Errorf("--tokenizer: %w", err)
		}
		return tok, nil
	}
	if _, err := os.Stat(filepath.Join(modelDir, tokenizer.File)); err != nil {
		if text {
			return nil, fmt.Errorf("the prompt is text and %s holds no %s to encode it: give --tokenizer DIR (the model's Hugging Face folder, for a checkpoint), or the prompt's ids with --prompt-ids",
				modelDir, tokenizer.File)
		}
		return nil, nil
	}
	tok, err := tokenizer.Load(modelDir)
	if err != nil {
		return nil, fmt.Errorf("the tokenizer of %s (give another with --tokenizer DIR): %w", modelDir, err)
	}
	return tok, nil
}

// maxPromptFile is the largest prompt file read: far more text than any model's positions hold.
const maxPromptFile = 64 << 20

// promptTokens returns the prompt's ids: --prompt-ids', or the text of --prompt or --prompt-file
// encoded by tok.
func (f *generateFlags) promptTokens(tok *tokenizer.Tokenizer) ([]int32, error) {
	if f.set["prompt-ids"] {
		ids, err := parseIDs(f.promptIDs, math.MaxInt32)
		if err != nil {
			return nil, fmt.Errorf("--prompt-ids: %w", err)
		}
		return infer.IDs(ids), nil
	}
	text := f.prompt
	if f.set["prompt-file"] {
		raw, err := regularfile.ReadLinked(f.promptFile, maxPromptFile)
		if err != nil {
			return nil, fmt.Errorf("--prompt-file: %w", err)
		}
		text = string(raw)
	}
	ids := infer.IDs(tok.Encode(text, f.special))
	if len(ids) == 0 {
		return nil, fmt.Errorf("the prompt %q encodes to no tokens: give some text, or --special to start from the tokenizer's BOS", text)
	}
	return ids, nil
}

// openModel reads the model, refuses a prompt it cannot continue (from the config alone, before
// the weights, for --hf) and returns a Generator of it with its weights (and --adapter's, as eval
// applies them), and the policy it computes under.
func (f *generateFlags) openModel(backend backends.Backend, prompt []int32, o infer.Options) (*infer.Generator, mixed.Policy, error) {
	if f.checkpoint != "" {
		l, err := train.LoadOn(backend, f.checkpoint)
		if err != nil {
			return nil, mixed.Policy{}, fmt.Errorf("--checkpoint: %w", err)
		}
		if err := infer.Check(l.Model, prompt, o); err != nil {
			return nil, mixed.Policy{}, errors.New(flagWords.Replace(err.Error()))
		}
		g, err := infer.New(backend, l.Model, l.Ctx, l.Settings())
		return g, l.Policy, err
	}
	policy, err := mixed.ParsePolicy(f.policy)
	if err != nil {
		return nil, policy, fmt.Errorf("--policy: %w", err)
	}
	if err := policy.Validate(backend); err != nil {
		return nil, policy, fmt.Errorf("--policy: %w", err)
	}
	layout, err := hf.ReadConfig(f.hfDir, 0)
	if err != nil {
		return nil, policy, err
	}
	model, ok := layout.Model().(train.Model)
	if !ok {
		return nil, policy, fmt.Errorf("--hf %s holds %v, not a model onegpu trains", f.hfDir, layout.Model())
	}
	if err := infer.Check(model, prompt, o); err != nil {
		return nil, policy, errors.New(flagWords.Replace(err.Error()))
	}
	options, err := f.adapter.options(policy.Param, 0)
	if err != nil {
		return nil, policy, err
	}
	p, err := hf.OpenWith(context.New(), f.hfDir, options)
	if err != nil {
		return nil, policy, err
	}
	settings := train.Settings{Policy: policy}
	if settings.LoRA, err = f.adapter.apply(p, policy.Param, options); err != nil {
		return nil, policy, err
	}
	g, err := infer.New(backend, p.Model.(train.Model), p.Ctx, settings)
	return g, policy, err
}
