package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/hf"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/recipes"
	"github.com/onegpu/onegpu/train"
	"github.com/onegpu/onegpu/train/checkpoint"
)

// hfRun is what train's Hugging Face flags ask: start from a checkpoint's weights (--init-hf),
// write the trained model as one (--export-hf).
type hfRun struct {
	initDir, exportDir string
	// overwrite (--overwrite) lets the export replace files onegpu did not export;
	// checkpointDir (--checkpoint) is a folder the run reads and writes, which the export may not be.
	overwrite     bool
	checkpointDir string
}

func (h *hfRun) register(fs *flag.FlagSet) {
	fs.StringVar(&h.initDir, "init-hf", "", "start from the weights of this Hugging Face checkpoint (config.json and safetensors: a Llama or a Qwen2);\nthe model's shape comes from config.json (implies --model of its family; a --preset must be that shape) (default: the seed's weights)")
	fs.StringVar(&h.exportDir, "export-hf", "", "after training, write the model to this folder as a Hugging Face checkpoint that transformers loads\n(config.json, model.safetensors or shards): a new or empty folder, or one onegpu exported before (it holds "+hf.MarkerFile+");\nanother folder only with --overwrite; never --init-hf's. Checked before training (default: none)")
}

// prepare reads --init-hf's config.json and makes its model the run's, before the setup flags are
// read into a config: --model must be its family (or left out) and a --preset the same shape.
func (h *hfRun) prepare(s *setup, set map[string]bool) error {
	if h.initDir == "" {
		return nil
	}
	layout, err := hf.ReadConfig(h.initDir, 0)
	if err != nil {
		return fmt.Errorf("--init-hf: %w", err)
	}
	// The weights' headers against the config, before anything of the config's size is built.
	if err := hf.CheckWeights(h.initDir, layout); err != nil {
		return fmt.Errorf("--init-hf: %w", err)
	}
	l, ok := layout.Model().(models.Llama)
	if !ok {
		return fmt.Errorf("--init-hf %s holds %v: train starts from Llama-class checkpoints", h.initDir, layout.Model())
	}
	// The --model of the folder's family: its model_type when a family of that name is registered
	// (qwen2), else llama (a Mistral checkpoint is a Llama to train).
	name, _ := layout.Config()["model_type"].(string)
	if _, err := recipes.Lookup(name); err != nil {
		name = "llama"
	}
	if set["model"] && s.model != name {
		return fmt.Errorf("--init-hf %s holds a %s model; --model %s cannot take its weights: use --model %s, or leave --model out", h.initDir, name, s.model, name)
	}
	s.model = name
	if set["preset"] {
		family, err := recipes.Lookup(name)
		if err != nil {
			return err
		}
		run, err := family.Run(s.preset)
		if err != nil {
			return err
		}
		if p, ok := run.Model.(models.Llama); !ok || !p.Config.SameModel(l.Config) {
			return fmt.Errorf("--preset %s is not the model of %s/config.json:\n  preset:      %v\n  config.json: %s\nleave --preset out: --init-hf takes the shape from config.json",
				s.preset, h.initDir, run.Model, l)
		}
	}
	s.base = func() (train.Config, error) { return recipes.LlamaRun(l.Config) }
	return nil
}

// check refuses --export-hf, before any training, for a model no Hugging Face family writes, a
// folder that cannot be written, one the run reads (--init-hf, --checkpoint), one that holds files
// onegpu did not export (without --overwrite), and --init-hf files to copy that cannot be read.
func (h *hfRun) check(c train.Config) error {
	if h.exportDir == "" {
		return nil
	}
	if _, err := hf.Describe(c.Model); err != nil {
		return fmt.Errorf("--export-hf: %w", err)
	}
	if h.checkpointDir != "" && sameFolder(h.exportDir, h.checkpointDir) {
		return fmt.Errorf("--export-hf %s is the --checkpoint folder: export to another folder", h.exportDir)
	}
	if err := checkOutputFolder("export-hf", h.exportDir); err != nil {
		return err
	}
	return h.flagError(hf.CheckExportFolder(h.exportDir, h.options(dtypes.Float32)))
}

// options are the export's options: dtype, --init-hf, --overwrite.
func (h *hfRun) options(dtype dtypes.DType) hf.ExportOptions {
	return hf.ExportOptions{DType: dtype, From: h.initDir, Overwrite: h.overwrite}
}

// flagError says an export's error in the CLI's words: the flags that set what it names.
func (h *hfRun) flagError(err error) error {
	return exportError("export-hf", err, map[string]string{h.initDir: "init-hf"})
}

// exportError says the error of the export --flag sets in the CLI's words: --overwrite for a
// folder of someone else's files, and for the folder the run reads, the flag that names it
// (sources: flag by folder).
func exportError(flag string, err error, sources map[string]string) error {
	var foreign *hf.ForeignFolderError
	var source *hf.SourceFolderError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &foreign):
		return fmt.Errorf("--%s %s", flag, foreign.Explain("give --overwrite"))
	case errors.As(err, &source):
		return fmt.Errorf("--%s %s is the folder of --%s %s: the export would replace what the run reads; export to another folder",
			flag, source.Dir, sources[source.From], source.From)
	}
	return fmt.Errorf("--%s: %w", flag, err)
}

// sameFolder reports whether paths a and b name one folder: the same file when both exist
// (through links or ".."), the same absolute path otherwise.
func sameFolder(a, b string) bool {
	ia, errA := os.Stat(a)
	ib, errB := os.Stat(b)
	if errA == nil && errB == nil {
		return os.SameFile(ia, ib)
	}
	absA, errA := filepath.Abs(a)
	absB, errB := filepath.Abs(b)
	return errA == nil && errB == nil && absA == absB
}

// load opens --init-hf into the trainer's context, in the weights' dtype (hf.Open; --base-dtype under --lora),
// unless the run resumes from a checkpoint, whose weights it continues from. A LoRA run's
// checkpoints hold its adapters, not its base: it loads --init-hf's base also when it resumes,
// and the run checks it is the base the checkpoint records. A LoRA run's base is hashed and
// quantized as it is read (train.Trainer.SetBase), so that a QLoRA run never holds it whole in
// full precision.
func (h *hfRun) load(t *train.Trainer, store *checkpoint.Folder, progress io.Writer) error {
	if h.initDir == "" {
		return nil
	}
	resumes := store != nil && store.ResumeFrom != ""
	if resumes && !t.Config.LoRA.Active() {
		if progress != nil {
			fmt.Fprintf(progress, "the run resumes from %s: its weights, not --init-hf's\n", store.Dir())
		}
		return nil
	}
	seq := 0
	if lm, ok := t.Config.Model.(train.LanguageModel); ok {
		seq, _ = lm.TokenShape()
	}
	options := hf.Options{DType: t.Config.WeightDType(), Seq: seq}
	var err error
	if t.Config.LoRA.Active() {
		from := h.initDir
		if abs, err := filepath.Abs(h.initDir); err == nil {
			from = abs
		}
		from = fmt.Sprintf("Hugging Face folder %s in %s", from, strings.ToLower(options.DType.String()))
		err = t.SetBase(from, func(ctx *context.Context, b *train.BaseWeights) error {
			options.Sink = b
			_, err := hf.OpenWith(ctx, h.initDir, options)
			return err
		})
	} else {
		err = t.SetWeights(func(ctx *context.Context) error {
			_, err := hf.OpenWith(ctx, h.initDir, options)
			return err
		})
	}
	if err != nil {
		return fmt.Errorf("--init-hf: %w", err)
	}
	if progress != nil {
		what := "weights"
		if t.Config.LoRA.Active() {
			what = "frozen base"
		}
		fmt.Fprintf(progress, "%s from %s\n", what, h.initDir)
	}
	return nil
}

// export writes the trained model to --export-hf as its family does (hf.Export): bfloat16
// tensors when the parameters are bfloat16, float32 otherwise; --init-hf's tokenizer and
// generation files come along.
func (h *hfRun) export(t *train.Trainer, progress io.Writer) error {
	if h.exportDir == "" {
		return nil
	}
	opts := h.options(dtypes.Float32)
	if t.Config.Policy.Param == dtypes.BFloat16 {
		opts.DType = dtypes.BFloat16
	}
	if err := hf.Export(t.Ctx, h.exportDir, t.Config.Model, opts); err != nil {
		return h.flagError(err)
	}
	if progress != nil {
		fmt.Fprintf(progress, "%-22s %s (Hugging Face, %s)\n", "exported", h.exportDir, opts.DType)
	}
	return nil
}
