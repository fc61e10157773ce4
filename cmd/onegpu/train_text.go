package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/onegpu/onegpu/data"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/tokenizer"
	"github.com/onegpu/onegpu/train"
)

// textRun is what train's flags for text data ask: --data FILE.txt|FILE.jsonl|FOLDER, tokenized
// with --tokenizer (the --init-hf folder by default), packed into the run's sequences, and
// evaluated on --eval-data or a share of the documents held out (--eval-split) every
// --eval-every steps.
type textRun struct {
	tokenizerDir, template, separator, evalData string
	evalSplit                                   float64
	evalEvery                                   int

	text       bool // --data names text
	tok        *tokenizer.Tokenizer
	tokHash    [32]byte
	evaluating bool
}

func (r *textRun) register(fs *flag.FlagSet) {
	fs.StringVar(&r.tokenizerDir, "tokenizer", "", "with text --data, the tokenizer: a Hugging Face folder with tokenizer.json (and tokenizer_config.json\nor generation_config.json naming BOS and EOS) (default: the --init-hf folder)")
	fs.StringVar(&r.template, "template", "", "with a .jsonl --data of \"messages\", the chat template that renders them: "+strings.Join(data.ChatTemplateNames(), ", ")+"\n(the assistant's replies carry the loss) (default: none; a file of messages needs one)")
	fs.StringVar(&r.separator, "separator", "", `with a .txt --data, split it into documents at each occurrence of this text (Go escapes read: "\n\n") (default: one document a file)`)
	fs.StringVar(&r.evalData, "eval-data", "", "evaluate on this text data (as --data: .txt, .jsonl or a folder) every --eval-every steps and after the last (default: none)")
	fs.Float64Var(&r.evalSplit, "eval-split", 0, "hold out this share of --data's documents, drawn with --seed, for evaluation instead, e.g. 0.05 (default: none)")
	fs.IntVar(&r.evalEvery, "eval-every", 0, "with --eval-data or --eval-split, evaluate every N steps (default: --log-every's)")
}

// isTextData reports whether --data names text data: a .txt or .jsonl file, or a folder.
func isTextData(name string) bool {
	if name == "text" || name == "synthetic" {
		return false
	}
	if strings.HasSuffix(name, ".txt") || strings.HasSuffix(name, ".jsonl") {
		return true
	}
	info, err := os.Stat(name)
	return err == nil && info.IsDir()
}

// prepare checks the text flags against --data and the run, before any work: flags that do not
// apply, an unknown template, the tokenizer (loaded now: a missing or unreadable one, or one whose
// ids the model cannot take, is refused here), and makes the model train on packed documents.
func (r *textRun) prepare(c *train.Config, dataName, initDir string, set map[string]bool) error {
	r.text = isTextData(dataName)
	r.evaluating = r.evalData != "" || set["eval-split"]
	if !r.text {
		return notApplicable(set, fmt.Sprintf("--data %s is not text data (a .txt or .jsonl file, or a folder of .txt files)", dataName),
			"tokenizer", "template", "separator", "eval-data", "eval-split", "eval-every")
	}
	if err := atLeast(set, "eval-every", r.evalEvery, 1); err != nil {
		return err
	}
	if set["eval-every"] && !r.evaluating {
		return fmt.Errorf("--eval-every %d does not apply: nothing to evaluate; add --eval-data FILE or --eval-split SHARE", r.evalEvery)
	}
	if r.evalData != "" && set["eval-split"] {
		return fmt.Errorf("--eval-data and --eval-split both give evaluation data: use one")
	}
	if set["eval-split"] && !(r.evalSplit > 0 && r.evalSplit < 1) {
		return fmt.Errorf("--eval-split %g: hold out a share of the documents in (0, 1), e.g. 0.05", r.evalSplit)
	}
	if strings.Contains(r.separator, `\`) {
		sep, err := strconv.Unquote(`"` + strings.ReplaceAll(r.separator, `"`, `\"`) + `"`)
		if err != nil {
			return fmt.Errorf("--separator %q: %v (escapes as in Go: \\n, \\t, \\\\)", r.separator, err)
		}
		r.separator = sep
	}
	if r.template != "" {
		if _, err := data.ChatTemplate(r.template); err != nil {
			return fmt.Errorf("--template: %w", err)
		}
	}
	if r.evaluating {
		if err := c.CanEvaluate(); err != nil {
			return fmt.Errorf("--eval-data, --eval-split: %w", err)
		}
	}
	lm, ok := c.Model.(train.LanguageModel)
	if !ok {
		return fmt.Errorf("--data %s is text for a language model; the model is %v", dataName, c.Model)
	}
	switch m := c.Model.(type) {
	case models.Llama:
		m.Packed = true
		c.Model = m
	case models.GPT:
		m.Packed = true
		c.Model = m
	default:
		return fmt.Errorf("--data %s: text data is packed into sequences, which the %v does not read (a Llama or the GPT does)", dataName, c.Model)
	}
	if err := c.Validate(); err != nil {
		return err
	}
	dir := r.tokenizerDir
	if dir == "" {
		dir = initDir
	}
	if dir == "" {
		return fmt.Errorf("--data %s is text: name its tokenizer with --tokenizer DIR (a Hugging Face folder with tokenizer.json), or start from --init-hf DIR whose folder has one", dataName)
	}
	var err error
	if r.tok, err = tokenizer.Load(dir); err != nil {
		return fmt.Errorf("--tokenizer %s: %w", dir, err)
	}
	folder := dir
	if info, err := os.Stat(dir); err == nil && !info.IsDir() {
		folder = filepath.Dir(dir)
	}
	files := []string{filepath.Join(folder, tokenizer.File), filepath.Join(folder, "tokenizer_config.json"), filepath.Join(folder, "generation_config.json")}
	if folder != dir {
		files[0] = dir
	}
	if r.tokHash, err = data.HashFiles(files...); err != nil {
		return fmt.Errorf("--tokenizer %s: %w", dir, err)
	}
	if _, vocab := lm.TokenShape(); r.tok.VocabSize() > vocab {
		return fmt.Errorf("--tokenizer %s has %d tokens, more than the model's vocabulary of %d: its ids would not fit; use the model's own tokenizer",
			dir, r.tok.VocabSize(), vocab)
	}
	r.tokenizerDir = dir
	return nil
}

// read reads, tokenizes (or finds in the cache) and packs the data, and the evaluation data when
// asked, for the run of c: the tokenized data is cached under the checkpoint folder when there is
// one, in the user's cache folder otherwise.
func (r *textRun) read(c train.Config, dataName, checkpointDir string, progress io.Writer) (*data.Packed, *data.Packed, error) {
	opts := data.TokenizeOptions{Format: data.TextFormat{Separator: r.separator, Template: r.template}, Tokenizer: r.tok,
		TokenizerSHA256: r.tokHash, Progress: progress, CacheDir: tokenizedCache(checkpointDir)}
	text, err := data.ReadTokenized(dataName, opts)
	if err != nil {
		return nil, nil, fmt.Errorf("--data: %w", err)
	}
	var evalText *data.TokenizedText
	switch {
	case r.evalData != "":
		if evalText, err = data.ReadTokenized(r.evalData, opts); err != nil {
			return nil, nil, fmt.Errorf("--eval-data: %w", err)
		}
	case r.evaluating:
		if text, evalText, err = text.Split(r.evalSplit, c.Seed); err != nil {
			return nil, nil, fmt.Errorf("--eval-split: %w", err)
		}
	}
	seq, vocab := c.Model.(train.LanguageModel).TokenShape()
	batches, err := data.NewPacked(text, seq, c.Batch, vocab, c.Seed)
	if err != nil {
		return nil, nil, fmt.Errorf("--data: %w", err)
	}
	var eval *data.Packed
	if evalText != nil {
		if eval, err = data.NewPacked(evalText, seq, c.Batch, vocab, c.Seed); err != nil {
			return nil, nil, fmt.Errorf("evaluation data: %w", err)
		}
	}
	return batches, eval, nil
}

// tokenizedCache is the folder of the tokenized data's cache: "tokenized" in the checkpoint
// folder, else onegpu's in the user's cache folder ("" when there is none).
func tokenizedCache(checkpointDir string) string {
	if checkpointDir != "" {
		return filepath.Join(checkpointDir, "tokenized")
	}
	if dir, err := os.UserCacheDir(); err == nil {
		return filepath.Join(dir, "onegpu", "tokenized")
	}
	return ""
}
