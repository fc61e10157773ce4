package infer

import (
	"fmt"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/train"
)

// Generator generates tokens from a language model and its weights in a context. It keeps the
// programs it compiles (a KV cache's prefill and decode programs, one per shape bucket) for the
// generations that follow; Close releases them. A Generator is not safe for concurrent use.
type Generator struct {
	// Model is the language model; a CachedModel generates with a KV cache.
	Model Model
	// Settings are the graphs' settings (train.Settings.Apply): evaluation mode, the precision
	// policy (the KV cache holds keys and values in its compute dtype) and whatever a later
	// setting adds (an adapter) that the model's layers read.
	Settings train.Settings
	// Backend runs the programs; Ctx holds the model's weights (in Reuse or unchecked mode: a
	// variable the graphs ask for must be there).
	Backend backends.Backend
	Ctx     *context.Context

	prefill   map[int]*context.Exec // by cache length
	decode    *context.Exec
	recompute *context.Exec
}

// New returns a Generator of model (an infer.Model) with its weights in ctx, on backend, under
// settings (Training must be false; the zero Policy is float32). A train.Loaded generates with
// New(l.Backend, l.Model, l.Ctx, l.Settings()), a Hugging Face folder with hf.Open's model and
// context.
func New(backend backends.Backend, model train.Model, ctx *context.Context, settings train.Settings) (*Generator, error) {
	m, err := asModel(model)
	if err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	if settings.Training {
		return nil, fmt.Errorf("generate: Settings.Training is true: generation runs in evaluation mode (no dropout)")
	}
	if settings.Policy == (mixed.Policy{}) {
		settings.Policy = mixed.Float32
	}
	if err := settings.Policy.Validate(backend); err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	return &Generator{Model: m, Settings: settings, Backend: backend, Ctx: ctx, prefill: map[int]*context.Exec{}}, nil
}

// Options say what Generate generates.
type Options struct {
	// MaxNewTokens is the most tokens generated (at least 1); the prompt and they together fit in
	// the model's positions.
	MaxNewTokens int
	// Sampling chooses each token: the zero Sampling is greedy.
	Sampling Sampling
	// StopTokens end the generation when one is generated (the tokenizer's EOSTokens): it is the
	// last of Result.Tokens. None: MaxNewTokens tokens.
	StopTokens []int32
	// NoCache recomputes the whole sequence for every token instead of reading a KV cache: the
	// baseline the cache is measured against. A Model that is not a CachedModel always does.
	NoCache bool
	// OnToken, when set, receives each token as soon as it is chosen (to stream its text); an
	// error it returns ends the generation and Generate returns it.
	OnToken func(token int32) error
}

// Result is what Generate generated, and how long it took.
type Result struct {
	// Tokens are the generated tokens, the stop token included when one ended the generation.
	Tokens []int32
	// Stopped says a stop token ended the generation (otherwise MaxNewTokens did).
	Stopped bool
	// Cached says the generation read a KV cache, of CacheLength positions.
	Cached      bool
	CacheLength int
	// Compile is the time spent building and compiling programs (none when an earlier generation
	// compiled them); Prefill the time from the prompt to the first token's logits; Decode the
	// time of the tokens after the first (feeding each back and choosing the next).
	Compile, Prefill, Decode time.Duration
}

// TokensPerSecond is the decoding rate: the tokens after the first per second of Decode (0 when
// fewer than two tokens were generated).
func (r Result) TokensPerSecond() float64 {
	if len(r.Tokens) < 2 || r.Decode <= 0 {
		return 0
	}
	return float64(len(r.Tokens)-1) / r.Decode.Seconds()
}

// Positions is the longest sequence g's model reads, prompt and generated tokens together.
func (g *Generator) Positions() int { return positionsOf(g.Model) }

// Check returns the error Generate would return for prompt and o before any work: an empty
// prompt, a token outside the vocabulary, a prompt and MaxNewTokens beyond the model's positions,
// bad Sampling.
func (g *Generator) Check(prompt []int32, o Options) error { return Check(g.Model, prompt, o) }

// Check is Generator.Check for model before its weights are read (hf.ReadConfig's model, for
// instance): what a Generator of it would refuse.
func Check(model train.Model, prompt []int32, o Options) error {
	m, err := asModel(model)
	if err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	_, vocab := m.TokenShape()
	limit := positionsOf(m)
	switch {
	case len(prompt) == 0:
		return fmt.Errorf("generate: the prompt is empty: give at least one token (a tokenizer's BOS, for instance)")
	case o.MaxNewTokens < 1:
		return fmt.Errorf("generate: Options.MaxNewTokens = %d: generate at least 1 token", o.MaxNewTokens)
	case len(prompt) >= limit:
		return fmt.Errorf("generate: the prompt has %d tokens; the model reads at most %d positions, prompt and generated tokens together: shorten the prompt",
			len(prompt), limit)
	case len(prompt)+o.MaxNewTokens > limit:
		return fmt.Errorf("generate: a prompt of %d tokens and Options.MaxNewTokens = %d make %d tokens; the model reads at most %d positions: generate at most %d tokens",
			len(prompt), o.MaxNewTokens, len(prompt)+o.MaxNewTokens, limit, limit-len(prompt))
	}
	for i, tok := range prompt {
		if tok < 0 || int(tok) >= vocab {
			return fmt.Errorf("generate: prompt token #%d is %d, outside the model's vocabulary [0, %d)", i, tok, vocab)
		}
	}
	for _, tok := range o.StopTokens {
		if tok < 0 || int(tok) >= vocab {
			return fmt.Errorf("generate: Options.StopTokens holds %d, outside the model's vocabulary [0, %d)", tok, vocab)
		}
	}
	if err := o.Sampling.Validate(); err != nil {
		return fmt.Errorf("generate: Options.%w", err)
	}
	return nil
}

// Generate returns the tokens the model generates after prompt: up to o.MaxNewTokens, ending at
// a stop token, each chosen as o.Sampling says and handed to o.OnToken as soon as it is. With a
// KV cache (a CachedModel, unless o.NoCache) the prompt is read in one pass and every token after
// it in one step of a program compiled once per cache length; otherwise every token recomputes
// the whole sequence. Everything Check refuses is refused before any work.
func (g *Generator) Generate(prompt []int32, o Options) (Result, error) {
	if err := g.Check(prompt, o); err != nil {
		return Result{}, err
	}
	total := len(prompt) + o.MaxNewTokens
	var s session
	r := Result{}
	if cm, ok := g.Model.(CachedModel); ok && !o.NoCache {
		length := bucket(total, leastCache, g.Positions())
		s = &cachedSession{g: g, m: cm, length: length}
		r.Cached, r.CacheLength = true, length
	} else {
		s = &recomputeSession{g: g, limit: g.Positions()}
	}
	defer s.close()
	start := time.Now()
	if err := s.compile(len(prompt), total); err != nil {
		return Result{}, fmt.Errorf("generate: compiling: %w", err)
	}
	r.Compile = time.Since(start)
	stop := map[int32]bool{}
	for _, t := range o.StopTokens {
		stop[t] = true
	}
	sm := newSampler(o.Sampling)
	start = time.Now()
	logits, err := s.prefill(prompt)
	if err != nil {
		return r, fmt.Errorf("generate: %w", err)
	}
	r.Prefill = time.Since(start)
	start = time.Now()
	for {
		tok, err := sm.next(logits)
		if err != nil {
			return r, fmt.Errorf("generate: token %d: %w", len(r.Tokens), err)
		}
		r.Tokens = append(r.Tokens, tok)
		if o.OnToken != nil {
			if err := o.OnToken(tok); err != nil {
				return r, err
			}
		}
		if stop[tok] {
			r.Stopped = true
			break
		}
		if len(r.Tokens) == o.MaxNewTokens {
			break
		}
		if logits, err = s.next(tok); err != nil {
			return r, fmt.Errorf("generate: %w", err)
		}
	}
	r.Decode = time.Since(start)
	return r, nil
}

// Close releases the compiled programs; the backend and the context stay the caller's.
func (g *Generator) Close() {
	for _, e := range g.prefill {
		e.Finalize()
	}
	clear(g.prefill)
	for _, e := range []**context.Exec{&g.decode, &g.recompute} {
		if *e != nil {
			(*e).Finalize()
			*e = nil
		}
	}
}

// cacheDType is the dtype of the KV cache: the policy's compute dtype.
func (g *Generator) cacheDType() dtypes.DType { return g.Settings.Policy.Compute }
