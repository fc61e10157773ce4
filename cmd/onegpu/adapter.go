package main

import (
	"flag"
	"fmt"
	"io"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/hf"
	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/quant"
	"github.com/onegpu/onegpu/train"
	"github.com/onegpu/onegpu/train/checkpoint"
)

// adapterRun is what train's adapter flags ask: start from a PEFT adapter (--init-adapter),
// write the trained adapters as one (--export-adapter), write the model with them merged
// (--export-hf with --merge).
type adapterRun struct {
	initDir, exportDir string
	merge              bool
	base               string // --init-hf, the exported adapter's base_model_name_or_path
	overwrite          bool   // --overwrite: the export may replace files onegpu did not export
}

func (a *adapterRun) register(fs *flag.FlagSet) {
	fs.StringVar(&a.initDir, "init-adapter", "", "start the adapters from this PEFT LoRA adapter folder (adapter_config.json, adapter_model.safetensors);\nits config is the run's --lora (a --lora given must be the same) (default: PEFT's initialization)")
	fs.StringVar(&a.exportDir, "export-adapter", "", "after training, write the adapters to this folder as PEFT does (peft.PeftModel.from_pretrained loads it on the base) (default: none)")
	fs.BoolVar(&a.merge, "merge", false, "with --lora and --export-hf: write the model with the adapters merged into its weights, as PEFT's merge_and_unload")
}

// prepare makes --init-adapter's LoRA the run's, before the setup flags are read into a config.
func (a *adapterRun) prepare(s *setup, set map[string]bool) error {
	if a.initDir == "" {
		return nil
	}
	lora, _, err := hf.ReadAdapterConfig(a.initDir)
	if err != nil {
		return fmt.Errorf("--init-adapter: %w", err)
	}
	if set["lora"] {
		given, err := layers.ParseLoRA(s.lora.lora)
		if err != nil {
			return fmt.Errorf("--lora: %w", err)
		}
		if !sameLoRA(given, lora) {
			return fmt.Errorf("--lora %s is not --init-adapter %s's LoRA %s: leave --lora out, or give that one", given, a.initDir, lora)
		}
		return nil
	}
	s.lora.adapter = lora
	return nil
}

// sameLoRA reports whether a and b are the same adapters (targets in any order; dropout aside).
func sameLoRA(a, b layers.LoRA) bool {
	a, b = a.Resolved(), b.Resolved()
	return a.Rank == b.Rank && a.Alpha == b.Alpha && a.RSLoRA == b.RSLoRA &&
		slices.Equal(slices.Sorted(slices.Values(a.Targets)), slices.Sorted(slices.Values(b.Targets)))
}

// check refuses, before training, adapter flags without adapters and an export the run cannot
// write: --export-hf of a LoRA run without --merge would write the base without its adapters.
func (a *adapterRun) check(c train.Config, h *hfRun) error {
	a.base, a.overwrite = h.initDir, h.overwrite
	if !c.LoRA.Active() {
		for _, f := range []struct {
			name string
			set  bool
		}{{"export-adapter", a.exportDir != ""}, {"merge", a.merge}} {
			if f.set {
				return fmt.Errorf("--%s applies to a run with adapters: give --lora too", f.name)
			}
		}
		return nil
	}
	if h.exportDir != "" && !a.merge {
		return fmt.Errorf("--export-hf with --lora: give --merge to write the model with its adapters merged, or --export-adapter DIR for the adapters alone")
	}
	if a.merge && h.exportDir == "" {
		return fmt.Errorf("--merge applies to --export-hf: give --export-hf DIR")
	}
	if a.exportDir != "" {
		layout, err := hf.Describe(c.Model)
		if err != nil {
			return fmt.Errorf("--export-adapter: %w", err)
		}
		if _, err := hf.AdapterTensors(layout, c.LoRA); err != nil {
			return fmt.Errorf("--export-adapter: %w", err)
		}
		if h.checkpointDir != "" && sameFolder(a.exportDir, h.checkpointDir) {
			return fmt.Errorf("--export-adapter %s is the --checkpoint folder: export to another folder", a.exportDir)
		}
		if err := checkOutputFolder("export-adapter", a.exportDir); err != nil {
			return err
		}
		if err := hf.CheckAdapterFolder(a.exportDir, a.options()); err != nil {
			return a.flagError(err)
		}
	}
	return nil
}

// options are the adapter export's options: the base (--init-hf), the adapter the run started
// from (--init-adapter), --overwrite.
func (a *adapterRun) options() hf.AdapterOptions {
	return hf.AdapterOptions{Base: a.base, From: a.initDir, Overwrite: a.overwrite}
}

// flagError says an adapter export's error in the CLI's words.
func (a *adapterRun) flagError(err error) error {
	return exportError("export-adapter", err, map[string]string{a.initDir: "init-adapter", a.base: "init-hf"})
}

// load reads --init-adapter into the trainer's context, unless the run resumes from a checkpoint.
func (a *adapterRun) load(t *train.Trainer, store *checkpoint.Folder, progress io.Writer) error {
	if a.initDir == "" || (store != nil && store.ResumeFrom != "") {
		return nil
	}
	layout, err := hf.Describe(t.Config.Model)
	if err != nil {
		return fmt.Errorf("--init-adapter: %w", err)
	}
	err = t.SetWeights(func(ctx *context.Context) error {
		_, err := hf.LoadAdapter(ctx, a.initDir, layout, t.Config.Settings().Policy.Param)
		return err
	})
	if err != nil {
		return fmt.Errorf("--init-adapter: %w", err)
	}
	if progress != nil {
		fmt.Fprintf(progress, "adapters from %s\n", a.initDir)
	}
	return nil
}

// export writes --export-adapter, then merges the adapters for --export-hf --merge.
func (a *adapterRun) export(t *train.Trainer, progress io.Writer) error {
	if a.exportDir != "" {
		layout, err := hf.Describe(t.Config.Model)
		if err != nil {
			return err
		}
		if err := hf.ExportAdapter(t.Ctx, a.exportDir, layout, t.Config.LoRA, a.options()); err != nil {
			return a.flagError(err)
		}
		if progress != nil {
			fmt.Fprintf(progress, "%-22s %s (PEFT adapter, %s)\n", "exported", a.exportDir, t.Config.LoRA)
		}
	}
	if a.merge {
		if _, err := layers.MergeAdapters(t.Ctx, t.Config.LoRA); err != nil {
			return fmt.Errorf("--merge: %w", err)
		}
	}
	return nil
}

// adapterOnBase is --adapter DIR and --quantize-base of the commands that read a Hugging Face
// folder (eval, generate): a PEFT adapter applied to the folder's model, whose base is quantized
// as a QLoRA run trained it.
type adapterOnBase struct {
	dir, quantizeBase string
}

func (a *adapterOnBase) register(fs *flag.FlagSet) {
	fs.StringVar(&a.dir, "adapter", "", "a PEFT LoRA adapter folder (adapter_config.json, adapter_model.safetensors) for --hf's model, applied to it (default: none)")
	fs.StringVar(&a.quantizeBase, "quantize-base", "", "with --adapter: quantize the adapted base weights as a QLoRA run trained them, nf4 or int8 (default: as loaded)")
}

// check refuses --quantize-base without --adapter, and an unknown format, before anything is read.
func (a *adapterOnBase) check() error {
	if a.quantizeBase == "" {
		return nil
	}
	if a.dir == "" {
		return fmt.Errorf("--quantize-base applies to the base of an --adapter: give --adapter DIR")
	}
	if _, err := quant.ParseFormat(a.quantizeBase); err != nil {
		return fmt.Errorf("--quantize-base: %w", err)
	}
	return nil
}

// options are hf.OpenWith's options for the folder --adapter applies to, in param's dtype at
// sequence length seq: under --quantize-base the adapted base weights are quantized as they are
// read (layers.QuantizingSink), as a QLoRA run trained them, and never held whole in float.
func (a *adapterOnBase) options(param dtypes.DType, seq int) (hf.Options, error) {
	o := hf.Options{DType: param, Seq: seq}
	if a.dir == "" || a.quantizeBase == "" {
		return o, nil
	}
	lora, _, err := hf.ReadAdapterConfig(a.dir)
	if err != nil {
		return o, fmt.Errorf("--adapter: %w", err)
	}
	format, err := quant.ParseFormat(a.quantizeBase)
	if err != nil {
		return o, fmt.Errorf("--quantize-base: %w", err)
	}
	lora.Quantize = quant.Default(format)
	o.Sink = layers.QuantizingSink{LoRA: lora}
	return o, nil
}

// apply reads --adapter onto p's model (its variables in param's dtype; opened with options'
// sink); it returns the adapters, with the base's quantization, for the graphs' settings (none
// without --adapter).
func (a *adapterOnBase) apply(p *hf.Pretrained, param dtypes.DType, o hf.Options) (layers.LoRA, error) {
	if a.dir == "" {
		return layers.LoRA{}, nil
	}
	lora, err := hf.LoadAdapter(p.Ctx, a.dir, p.Layout, param)
	if err != nil {
		return lora, fmt.Errorf("--adapter: %w", err)
	}
	if q, ok := o.Sink.(layers.QuantizingSink); ok {
		lora.Quantize = q.LoRA.Quantize
	}
	return lora, nil
}
