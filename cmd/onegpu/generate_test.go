package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/onegpu/onegpu/internal/testkit"
)

// runGenerateOK runs generate with args on the embedded backend and returns its stdout and
// stderr, failing the test on an error.
func runGenerateOK(t *testing.T, args ...string) (stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	if err := runGenerate(append([]string{"--backend", "go"}, args...), &out, &errOut); err != nil {
		t.Fatalf("generate %v: %v", args, err)
	}
	return out.String(), errOut.String()
}

// TestGenerateText: `generate --hf DIR --prompt TEXT` prints transformers' greedy continuation
// of the text (the fixture's tokenizer in its folder), then a line of figures on stderr; --json
// gives the prompt's and the continuation's ids, and --prompt-ids transformers' continuation of
// ids, with the KV cache and without.
func TestGenerateText(t *testing.T) {
	fx := testkit.ReadHFFixture(t, "llama3_untied")
	want := testkit.ReadHFGreedy(t, "llama3_untied")
	out, summary := runGenerateOK(t, "--hf", fx.Dir, "--prompt", want.Text.PromptText, "--max-new-tokens", "32")
	if out != want.Text.Text+"\n" {
		t.Errorf("printed %q, transformers' continuation %q", out, want.Text.Text)
	}
	if !strings.Contains(summary, "32 tokens at ") || !strings.Contains(summary, "tokens/s") || !strings.Contains(summary, "a KV cache of 64 positions; greedy") {
		t.Errorf("summary %q", summary)
	}
	prompt := want.Cases[0]
	for _, noCache := range []string{"--no-cache=false", "--no-cache"} {
		ids, _ := json.Marshal(prompt.Prompt) // a JSON array, one of the forms --prompt-ids reads
		out, _ = runGenerateOK(t, "--hf", fx.Dir, "--prompt-ids", string(ids), "--max-new-tokens", "32", "--ignore-eos", "--json", noCache)
		var r generateReport
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%v: %q", err, out)
		}
		if !slices.Equal(r.PromptIDs, prompt.Prompt) || !slices.Equal(r.IDs, prompt.Tokens) || r.Text == nil || r.Cache == (noCache == "--no-cache") {
			t.Errorf("%s: %+v; want prompt %v, ids %v, a text", noCache, r, prompt.Prompt, prompt.Tokens)
		}
	}
}

// TestGenerateFromCheckpoint: a checkpoint `train` wrote generates with the tokenizer named by
// --tokenizer: what it prints is the text of the ids --json gives, and sampling with --seed gives
// the same ids twice.
func TestGenerateFromCheckpoint(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ck")
	if err := runTrain([]string{"--model", "llama", "--preset", "tiny", "--steps", "2", "--batch", "2", "--microbatches", "1", "--checkpoint", dir}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	tok := testkit.ReadHFFixture(t, "llama3_untied").Dir // 256 tokens, as the tiny Llama's vocabulary
	args := []string{"--checkpoint", dir, "--tokenizer", tok, "--prompt", "And God said", "--max-new-tokens", "12", "--ignore-eos"}
	text, _ := runGenerateOK(t, args...)
	var r generateReport
	out, _ := runGenerateOK(t, append(args, "--json")...)
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if len(r.IDs) != 12 || r.Text == nil || text != *r.Text+"\n" || !r.Cache {
		t.Errorf("printed %q; --json %+v", text, r)
	}
	sampled := append(args, "--temperature", "1", "--top-k", "20", "--seed", "9", "--json")
	a, _ := runGenerateOK(t, sampled...)
	b, _ := runGenerateOK(t, sampled...)
	var ra, rb generateReport
	if json.Unmarshal([]byte(a), &ra) != nil || json.Unmarshal([]byte(b), &rb) != nil || !slices.Equal(ra.IDs, rb.IDs) || ra.Seed != 9 {
		t.Errorf("seed 9 twice: %v and %v (seed %d)", ra.IDs, rb.IDs, ra.Seed)
	}
}

// TestGenerateRefuses: bad input is an error naming the flag, before any work.
func TestGenerateRefuses(t *testing.T) {
	fx := testkit.ReadHFFixture(t, "llama3_untied").Dir
	noTokenizer := testkit.ReadHFFixture(t, "qwen2_tied").Dir
	empty := filepath.Join(t.TempDir(), "empty.txt")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--prompt", "x"}, "generate needs one model: --hf DIR"},
		{[]string{"--hf", fx, "--checkpoint", fx, "--prompt", "x"}, "generate needs one model"},
		{[]string{"--hf", fx}, "generate needs one prompt"},
		{[]string{"--hf", fx, "--prompt", "x", "--prompt-ids", "1"}, "generate needs one prompt"},
		{[]string{"--hf", fx, "--prompt", ""}, "--prompt '': give a value"},
		{[]string{"--hf", fx, "--prompt-file", empty, "--special=false"}, "encodes to no tokens"},
		{[]string{"--hf", fx, "--prompt", "x", "--top-k", "5"}, "--top-k 5 filters a draw, and --temperature 0 is greedy decoding"},
		{[]string{"--hf", fx, "--prompt", "x", "--temperature", "-1"}, "--temperature -1 must be a finite number"},
		{[]string{"--hf", fx, "--prompt", "x", "--temperature", "1", "--top-p", "1.5"}, "--top-p 1.5 must be in [0, 1]"},
		{[]string{"--hf", fx, "--prompt", "x", "--seed", "3"}, "--seed seeds the draws of sampling"},
		{[]string{"--hf", fx, "--prompt", "x", "--max-new-tokens", "0"}, "--max-new-tokens 0: generate at least 1 token"},
		{[]string{"--hf", fx, "--prompt-ids", "1,2", "--max-new-tokens", "200"}, "a prompt of 2 tokens and --max-new-tokens 200 make 202 tokens; the model reads at most 128 positions: generate at most 126 tokens"},
		{[]string{"--hf", fx, "--prompt", strings.Repeat("God ", 200)}, "the model reads at most 128 positions"},
		{[]string{"--hf", fx, "--prompt-ids", "1,999"}, "prompt token #1 is 999, outside the model's vocabulary [0, 256)"},
		{[]string{"--hf", fx, "--prompt-ids", "1,x"}, `--prompt-ids: "x" is not a token id`},
		{[]string{"--hf", noTokenizer, "--prompt", "x"}, "the prompt is text and " + noTokenizer + " holds no tokenizer.json to encode it: give --tokenizer DIR"},
		{[]string{"--hf", fx, "--prompt", "x", "--tokenizer", noTokenizer}, "--tokenizer: "},
		{[]string{"--checkpoint", t.TempDir(), "--prompt-ids", "1", "--policy", "bf16"}, "--policy is for --hf"},
		{[]string{"--hf", fx, "--prompt", "x", "--policy", "f16x"}, "--policy"},
	} {
		var out, errOut bytes.Buffer
		err := runGenerate(append([]string{"--backend", "go"}, c.args...), &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("generate %v: %v, want %q", c.args, err, c.want)
		}
		if out.Len() != 0 {
			t.Errorf("generate %v printed %q before refusing", c.args, out.String())
		}
	}
}

// TestGenerateWithAdapter: generate --hf BASE --adapter DIR (the adapter PEFT wrote for the
// fixture) continues a prompt as the model with the adapter merged into its weights does (train's
// --export-hf --merge of that adapter, trained at a learning rate of 1e-30: unchanged), and
// otherwise than the base alone; --quantize-base nf4 generates on the quantized base; an adapter
// with --checkpoint, and --quantize-base without --adapter, are refused.
func TestGenerateWithAdapter(t *testing.T) {
	fx := testkit.ReadHFFixture(t, "llama3_untied")
	peftAdapter := filepath.Join(filepath.Dir(fx.Dir), "peft", "llama3_untied_lora")
	merged := filepath.Join(t.TempDir(), "merged")
	if err := runTrain([]string{"--init-hf", fx.Dir, "--init-adapter", peftAdapter, "--data", fx.Dir + ".tokens.npy", "--seq", "23", "--batch", "2",
		"--microbatches", "1", "--policy", "float32", "--steps", "1", "--lr", "1e-30", "--export-hf", merged, "--merge"}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	ids := func(args ...string) []int32 {
		out, _ := runGenerateOK(t, append(args, "--prompt-ids", "1 5 9 17 33", "--max-new-tokens", "16", "--ignore-eos", "--json")...)
		var r generateReport
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%v: %q", err, out)
		}
		return r.IDs
	}
	adapted, whole, base := ids("--hf", fx.Dir, "--adapter", peftAdapter), ids("--hf", merged), ids("--hf", fx.Dir)
	t.Logf("with the adapter %v; merged %v; the base alone %v", adapted, whole, base)
	if !slices.Equal(adapted, whole) || slices.Equal(adapted, base) {
		t.Errorf("with the adapter %v, merged %v: want the same; the base alone %v: want another", adapted, whole, base)
	}
	if q := ids("--hf", fx.Dir, "--adapter", peftAdapter, "--quantize-base", "nf4"); len(q) != 16 {
		t.Errorf("on the NF4 base: %v, want 16 tokens", q)
	}
	for want, args := range map[string][]string{
		"--adapter applies to --hf's model":                   {"--checkpoint", t.TempDir(), "--adapter", peftAdapter},
		"--quantize-base applies to the base of an --adapter": {"--hf", fx.Dir, "--quantize-base", "nf4"},
		"--quantize-base: quant: unknown format":              {"--hf", fx.Dir, "--adapter", peftAdapter, "--quantize-base", "nf3"},
	} {
		err := runGenerate(append(args, "--prompt-ids", "1 2"), &bytes.Buffer{}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v: %v, want an error saying %q", args, err, want)
		}
	}
}
