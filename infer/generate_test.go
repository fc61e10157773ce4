package infer_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/hf"
	"github.com/onegpu/onegpu/infer"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/tokenizer"
	"github.com/onegpu/onegpu/train"
)

// openFixture opens the committed transformers fixture name (hf/testdata) in float32 and returns
// a Generator of it on the embedded backend.
func openFixture(t *testing.T, name string) *infer.Generator {
	t.Helper()
	p, err := hf.Open(context.New(), testkit.ReadHFFixture(t, name).Dir, dtypes.Float32, 0)
	if err != nil {
		t.Fatal(err)
	}
	g, err := infer.New(testkit.Embedded(), p.Model.(train.Model), p.Ctx, train.Settings{Policy: mixed.Float32})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	return g
}

// TestGreedyEqualsTransformers: on every committed fixture (each family's), greedy generation
// gives transformers' generate(do_sample=False) tokens, token for token (f32, 32 new tokens, or
// as many as the positions or sliding window leave), with the KV cache and without; the text
// fixture's prompt, encoded by onegpu's tokenizer, is transformers' ids, and its continuation
// stops where transformers' does and decodes to transformers' text.
func TestGreedyEqualsTransformers(t *testing.T) {
	for _, name := range testkit.HFFixtureNames(t) {
		t.Run(name, func(t *testing.T) {
			want := testkit.ReadHFGreedy(t, name)
			g := openFixture(t, name)
			cases := want.Cases
			if want.Text != nil {
				cases = append(cases, *want.Text)
			}
			for _, c := range cases {
				for _, noCache := range []bool{false, true} {
					r, err := g.Generate(c.Prompt, infer.Options{MaxNewTokens: c.MaxNewTokens, StopTokens: c.StopTokens, NoCache: noCache})
					if err != nil {
						t.Fatal(err)
					}
					if !slices.Equal(r.Tokens, c.Tokens) || r.Cached == noCache {
						t.Errorf("prompt %v, no cache %v (cached %v): generated\n%v\ntransformers %s:\n%v", c.Prompt, noCache, r.Cached, r.Tokens, want.Transformers, c.Tokens)
					}
					if stopped := len(c.Tokens) < c.MaxNewTokens; r.Stopped != stopped {
						t.Errorf("prompt %v: Stopped %v, transformers stopped: %v", c.Prompt, r.Stopped, stopped)
					}
				}
			}
			if c := want.Text; c != nil {
				tok, err := tokenizer.Load(testkit.ReadHFFixture(t, name).Dir)
				if err != nil {
					t.Fatal(err)
				}
				if ids := infer.IDs(tok.Encode(c.PromptText, true)); !slices.Equal(ids, c.Prompt) {
					t.Errorf("%q encodes to %v, transformers' tokenizer %v", c.PromptText, ids, c.Prompt)
				}
				if eos := infer.IDs(tok.EOSTokens()); !slices.Equal(eos, c.StopTokens) {
					t.Errorf("the tokenizer's EOS tokens %v, transformers' %v", eos, c.StopTokens)
				}
				var out strings.Builder
				s := infer.NewTextStream(&out, tok, c.Prompt)
				for _, id := range c.Tokens {
					if err := s.Add(id); err != nil {
						t.Fatal(err)
					}
				}
				if err := s.Flush(); err != nil {
					t.Fatal(err)
				}
				if out.String() != c.Text || s.Text() != c.Text {
					t.Errorf("streamed %q (text %q), transformers decoded %q", out.String(), s.Text(), c.Text)
				}
			}
		})
	}
}

// TestGenerateStops: a stop token ends the generation with it (Stopped), and OnToken sees every
// token as it comes; an error from OnToken ends the generation with that error.
func TestGenerateStops(t *testing.T) {
	want := testkit.ReadHFGreedy(t, "llama3_untied").Cases[0]
	g := openFixture(t, "llama3_untied")
	stopAt := want.Tokens[5]
	first := slices.Index(want.Tokens, stopAt)
	var seen []int32
	r, err := g.Generate(want.Prompt, infer.Options{MaxNewTokens: 32, StopTokens: []int32{stopAt},
		OnToken: func(tok int32) error { seen = append(seen, tok); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Stopped || !slices.Equal(r.Tokens, want.Tokens[:first+1]) || !slices.Equal(seen, r.Tokens) {
		t.Errorf("stopping at %d: %v (stopped %v, seen %v), want %v", stopAt, r.Tokens, r.Stopped, seen, want.Tokens[:first+1])
	}
	r, err = g.Generate(want.Prompt, infer.Options{MaxNewTokens: 32, OnToken: func(tok int32) error {
		if tok == stopAt {
			return errStop
		}
		return nil
	}})
	if err != errStop || len(r.Tokens) != first+1 {
		t.Errorf("OnToken's error: %v after %d tokens, want %v after %d", err, len(r.Tokens), errStop, first+1)
	}
}

type stopError struct{}

func (stopError) Error() string { return "stop" }

var errStop = stopError{}

// TestGenerateRefuses: bad input is an error naming it before any work: an empty prompt, a token
// outside the vocabulary, a prompt at the model's positions, a generation beyond them, bad
// sampling, a model that is not a language model.
func TestGenerateRefuses(t *testing.T) {
	g := openFixture(t, "llama3_untied") // vocabulary 256, 128 positions
	long := make([]int32, 128)
	for _, c := range []struct {
		prompt []int32
		o      infer.Options
		want   string
	}{
		{nil, infer.Options{MaxNewTokens: 1}, "the prompt is empty"},
		{[]int32{1, 256}, infer.Options{MaxNewTokens: 1}, "prompt token #1 is 256, outside the model's vocabulary [0, 256)"},
		{[]int32{1}, infer.Options{MaxNewTokens: 0}, "Options.MaxNewTokens = 0"},
		{long, infer.Options{MaxNewTokens: 1}, "the prompt has 128 tokens; the model reads at most 128 positions"},
		{long[:100], infer.Options{MaxNewTokens: 40}, "make 140 tokens; the model reads at most 128 positions: generate at most 28 tokens"},
		{[]int32{1}, infer.Options{MaxNewTokens: 1, StopTokens: []int32{300}}, "Options.StopTokens holds 300"},
		{[]int32{1}, infer.Options{MaxNewTokens: 1, Sampling: infer.Sampling{Temperature: -1}}, "Options.Sampling.Temperature = -1"},
		{[]int32{1}, infer.Options{MaxNewTokens: 1, Sampling: infer.Sampling{TopK: 5}}, "Sampling.TopK = 5 filters a draw, and Sampling.Temperature = 0 is greedy"},
		{[]int32{1}, infer.Options{MaxNewTokens: 1, Sampling: infer.Sampling{Temperature: 1, TopP: 1.5}}, "Sampling.TopP = 1.5 must be in [0, 1]"},
	} {
		if _, err := g.Generate(c.prompt, c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("prompt of %d tokens, %+v: %v, want %q", len(c.prompt), c.o, err, c.want)
		}
	}
	if _, err := infer.New(testkit.Embedded(), classifier{}, context.New(), train.Settings{}); err == nil ||
		!strings.Contains(err.Error(), "is not a language model with Hidden and Head methods") {
		t.Errorf("a classifier: %v", err)
	}
	if _, err := infer.New(testkit.Embedded(), g.Model, context.New(), train.Settings{Training: true}); err == nil ||
		!strings.Contains(err.Error(), "Settings.Training is true") {
		t.Errorf("training mode: %v", err)
	}
}

// classifier is a train.Model that is not a language model.
type classifier struct{ train.Model }

// TestSamplingReproducible: sampling with a seed gives the same tokens every time, with the cache
// and without; other seeds give other tokens.
func TestSamplingReproducible(t *testing.T) {
	g := openFixture(t, "llama3_untied")
	prompt := testkit.ReadHFGreedy(t, "llama3_untied").Cases[0].Prompt
	run := func(seed uint64, noCache bool) []int32 {
		r, err := g.Generate(prompt, infer.Options{MaxNewTokens: 16, NoCache: noCache,
			Sampling: infer.Sampling{Temperature: 1.5, TopK: 50, TopP: 0.95, Seed: seed}})
		if err != nil {
			t.Fatal(err)
		}
		return r.Tokens
	}
	first := run(7, false)
	if again, uncached := run(7, false), run(7, true); !slices.Equal(first, again) || !slices.Equal(first, uncached) {
		t.Errorf("seed 7 gave %v, then %v, and without the cache %v", first, again, uncached)
	}
	differ := 0
	for seed := range uint64(4) {
		if !slices.Equal(run(100+seed, false), first) {
			differ++
		}
	}
	if differ < 3 {
		t.Errorf("%d of 4 other seeds gave other tokens than seed 7's %v", differ, first)
	}
}
