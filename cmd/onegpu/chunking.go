package main

import (
	"flag"
	"fmt"

	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/recipes"
	"github.com/onegpu/onegpu/train"
)

// registerChunking adds the flags of a language model's sequence and of how its attention, MLP
// and loss compute: --seq, --attention, --mlp and --cross-entropy.
func (s *setup) registerChunking(fs *flag.FlagSet) {
	fs.IntVar(&s.seq, "seq", 0, "tokens per sequence, for any preset of a language model (default: the preset's)")
	chunkingFlags(fs, &s.attention, &s.crossEntropy)
	fs.StringVar(&s.mlp, "mlp", "plain", fmt.Sprintf("the MLP (the Llama family's): plain (the whole sequence at once) or chunked[=CHUNK] "+
		"(CHUNK positions of each sequence at a time, each chunk recomputed in the backward pass; default %d)", layers.DefaultMLPChunk))
}

// chunkingFlags adds --attention and --cross-entropy (train's, memory's, ..., eval's) to fs.
func chunkingFlags(fs *flag.FlagSet, attention, crossEntropy *string) {
	fs.StringVar(attention, "attention", "plain", "attention: plain (the whole [seq, seq] scores at once) or chunked[=BLOCK] "+
		"(blocks of queries and keys with an online softmax: memory linear in the sequence; default block max(1024, seq/8)), "+
		"or chunked=QUERIESxKEYS")
	fs.StringVar(crossEntropy, "cross-entropy", "plain", fmt.Sprintf("the loss's output layer and cross-entropy: plain (all [tokens, vocabulary] logits at once) "+
		"or chunked[=CHUNK] (CHUNK tokens at a time, recomputed in the backward pass; default %d)", layers.DefaultCrossEntropyChunk))
}

// parseChunking reads the values of --attention and --cross-entropy; an error names the flag.
func parseChunking(attention, crossEntropy string) (layers.Attention, layers.CrossEntropy, error) {
	a, err := layers.ParseAttention(attention)
	if err != nil {
		return a, layers.CrossEntropy{}, fmt.Errorf("--%w", err)
	}
	c, err := layers.ParseCrossEntropy(crossEntropy)
	if err != nil {
		return a, c, fmt.Errorf("--%w", err)
	}
	return a, c, nil
}

// applyChunking sets c's sequence length (--seq) and its attention and cross-entropy from the
// flags; for a model that is not a language model, each of them given is an error.
func (s *setup) applyChunking(c *train.Config, family recipes.Family, set map[string]bool) error {
	if family.WithSeq == nil {
		return notApplicable(set, fmt.Sprintf("the %s is not a language model: it has no sequence, attention or token loss", s.model),
			"seq", "attention", "cross-entropy", "mlp")
	}
	var err error
	if c.Attention, c.CrossEntropy, err = parseChunking(s.attention, s.crossEntropy); err != nil {
		return err
	}
	if c.MLP, err = layers.ParseMLP(s.mlp); err != nil {
		return fmt.Errorf("--%w", err)
	}
	if !set["seq"] {
		return nil
	}
	if s.seq < 1 {
		return fmt.Errorf("--seq %d: a sequence has at least 1 token", s.seq)
	}
	if c.Model, err = family.WithSeq(c.Model, s.seq); err != nil {
		return fmt.Errorf("--seq %d: %w", s.seq, err)
	}
	return nil
}

// chunkingNote is ", attention A, cross-entropy C" for a run that chunks either (and ", mlp M"
// for one that chunks its MLP), "" otherwise: a part of a configuration's description.
func chunkingNote(c train.Config) string {
	note := ""
	if c.Attention.Chunked || c.CrossEntropy.Chunk > 0 {
		note = fmt.Sprintf(", attention %s, cross-entropy %s", describeAttention(c), c.CrossEntropy)
	}
	if c.MLP.Chunk > 0 {
		note += fmt.Sprintf(", mlp %s", c.MLP)
	}
	return note
}

// describeAttention is c's attention as --attention reads it, with the blocks it chooses itself
// at the model's sequence length.
func describeAttention(c train.Config) string {
	a := c.Attention
	lm, ok := c.Model.(train.LanguageModel)
	if !a.Chunked || a.Block > 0 || !ok {
		return a.String()
	}
	seq, _ := lm.TokenShape()
	queries, _ := a.Blocks(seq)
	return fmt.Sprintf("%s (block %d)", a, queries)
}
