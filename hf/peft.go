package hf

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/hf/safetensors"
	"github.com/onegpu/onegpu/internal/regularfile"
	"github.com/onegpu/onegpu/layers"
)

// A PEFT LoRA adapter folder, as peft's save_pretrained writes it and PeftModel.from_pretrained
// reads it: adapter_config.json (peft_type "LORA", r, lora_alpha, target_modules, ...) and
// adapter_model.safetensors, whose tensors are the adapters' weights named
// "base_model.model." + the base model's module + ".lora_A.weight" ([r, in]) or ".lora_B.weight"
// ([out, r]). onegpu's adapter variables have the same paths under the model's scope
// (layers.LoRA: q_proj/lora_A/weight), so the names map as the base model's do (VariableOf).
const (
	AdapterConfigFile  = "adapter_config.json"
	AdapterWeightsFile = "adapter_model.safetensors"
	peftPrefix         = "base_model.model."
)

// adapterConfig is the part of PEFT's LoraConfig that onegpu writes and reads; the fields PEFT
// has beyond it are defaults it fills in, and a folder that sets one onegpu cannot compute (DoRA,
// per-module ranks, biases, ...) is refused by ReadAdapterConfig.
type adapterConfig struct {
	PeftType      string         `json:"peft_type"`
	TaskType      string         `json:"task_type"`
	Base          string         `json:"base_model_name_or_path"`
	R             int            `json:"r"`
	Alpha         float64        `json:"lora_alpha"`
	Dropout       float64        `json:"lora_dropout"`
	TargetModules any            `json:"target_modules"`
	RSLoRA        bool           `json:"use_rslora"`
	DoRA          bool           `json:"use_dora"`
	Bias          string         `json:"bias"`
	FanInFanOut   bool           `json:"fan_in_fan_out"`
	LoRABias      bool           `json:"lora_bias"`
	RankPattern   map[string]any `json:"rank_pattern"`
	AlphaPattern  map[string]any `json:"alpha_pattern"`
	ModulesToSave any            `json:"modules_to_save"`
	LayersToXform any            `json:"layers_to_transform"`
	InitWeights   any            `json:"init_lora_weights"`
	Inference     bool           `json:"inference_mode"`
}

// AdapterTensors lists the adapters lora adds to the model layout describes, by their Hugging
// Face names without PEFT's prefix ("model.layers.0.self_attn.q_proj.lora_A.weight"), in the
// model's order, A before B. A target that names no projection of the model's layers, or a rank
// larger than a targeted matrix, is an error naming it and the model's projections.
func AdapterTensors(layout Layout, lora layers.LoRA) ([]TensorSpec, error) {
	lora = lora.Resolved()
	if !lora.Active() {
		return nil, errors.New("lora: no adapters: LoRA.Rank is 0")
	}
	var specs []TensorSpec
	var projections []string
	found := map[string]bool{}
	for _, spec := range layout.Tensors() {
		module, isWeight := strings.CutSuffix(spec.Name, ".weight")
		if !isWeight || len(spec.Shape) != 2 || !strings.HasPrefix(module, "model.layers.") {
			continue
		}
		name := module[strings.LastIndex(module, ".")+1:]
		if !slices.Contains(projections, name) {
			projections = append(projections, name)
		}
		if !lora.Targeted(name) {
			continue
		}
		found[name] = true
		out, in := spec.Shape[0], spec.Shape[1]
		if err := lora.CheckProjection(module, in, out); err != nil {
			return nil, err
		}
		specs = append(specs, TensorSpec{module + "." + layers.LoRAAName + ".weight", []int{lora.Rank, in}},
			TensorSpec{module + "." + layers.LoRABName + ".weight", []int{out, lora.Rank}})
	}
	for _, t := range lora.Targets {
		if !found[t] {
			return nil, fmt.Errorf("lora: target %q is not a projection of the %v model's layers: they are %s", t, layout.Config()["model_type"], strings.Join(projections, ", "))
		}
	}
	return specs, nil
}

// AdapterOptions are ExportAdapter's choices; the zero value writes float32.
type AdapterOptions struct {
	// DType of the tensors: dtypes.Float32 (the default, for InvalidDType) or dtypes.BFloat16.
	DType dtypes.DType
	// Base is adapter_config.json's base_model_name_or_path: the base model's folder or hub name.
	Base string
	// From is the adapter folder the run started from (--init-adapter), or "": ExportAdapter
	// refuses to write into it (*SourceFolderError), as it refuses Base's folder.
	From string
	// Overwrite lets ExportAdapter write into a folder that holds files it did not export (another
	// adapter, a model), as ExportOptions.Overwrite does for Export.
	Overwrite bool
}

// adapterFile names the files ExportAdapter writes.
func adapterFile(name string) bool { return name == AdapterConfigFile || name == AdapterWeightsFile }

// CheckAdapterFolder returns the error ExportAdapter would give for dir before it writes anything,
// so that a run can check its output before training: as CheckExportFolder, dir must be a new or
// empty folder or one onegpu exported before (MarkerFile), unless opts.Overwrite, and neither
// opts.From's folder nor opts.Base's.
func CheckAdapterFolder(dir string, opts AdapterOptions) error {
	return checkFolder(dir, adapterFile, opts.Overwrite, opts.From, opts.Base)
}

// ExportAdapter writes the adapters lora adds to the model layout describes, from ctx's
// variables, as a PEFT adapter folder dir (created if needed): adapter_config.json and
// adapter_model.safetensors, each replaced atomically. dir is checked and claimed as Export's
// (CheckAdapterFolder: a new or empty folder, or one onegpu exported, marked by MarkerFile; never
// the folder the adapter or the base was read from).
func ExportAdapter(ctx *context.Context, dir string, layout Layout, lora layers.LoRA, opts AdapterOptions) error {
	specs, err := AdapterTensors(layout, lora)
	if err != nil {
		return err
	}
	lora = lora.Resolved()
	if opts.DType == dtypes.InvalidDType {
		opts.DType = dtypes.Float32
	}
	to, ok := fileTypes[opts.DType]
	if !ok || (opts.DType != dtypes.Float32 && opts.DType != dtypes.BFloat16) {
		return fmt.Errorf("exporting an adapter: AdapterOptions.DType %s: want float32 or bfloat16", opts.DType)
	}
	if err := CheckAdapterFolder(dir, opts); err != nil { // before the variables: the folder is what a run checks first
		return fmt.Errorf("exporting an adapter to %s (nothing was written): %w", dir, err)
	}
	var tensors []safetensors.Tensor
	buf := make([]byte, 2*chunkBytes)
	for _, spec := range specs {
		v := lookupVariable(ctx, spec.Name)
		if v == nil || !slices.Equal(v.Shape().Dimensions, spec.Shape) {
			return fmt.Errorf("exporting an adapter: variable %s for %s [%v] is missing or of another shape: train with this LoRA first", scopeName(ctx, spec.Name), spec.Name, spec.Shape)
		}
		from, ok := fileTypes[v.DType()]
		if !ok {
			return fmt.Errorf("exporting an adapter: variable %s is %s, not a float dtype", v.ScopeAndName(), v.DType())
		}
		tensors = append(tensors, safetensors.Tensor{Name: peftPrefix + spec.Name, DType: to, Shape: spec.Shape,
			Data: func(w io.Writer) error { return writeVariable(w, v, from, to, buf) }})
	}
	folder, err := claimFolder(dir, adapterFile, func() error { return CheckAdapterFolder(dir, opts) })
	if err != nil {
		return fmt.Errorf("exporting an adapter to %s (nothing was written): %w", dir, err)
	}
	if err := writeAdapter(dir, tensors, lora, opts); err != nil {
		return errors.Join(err, folder.close())
	}
	return folder.finish(map[string]bool{AdapterConfigFile: true, AdapterWeightsFile: true})
}

// writeAdapter writes an adapter's weights and config into dir.
func writeAdapter(dir string, tensors []safetensors.Tensor, lora layers.LoRA, opts AdapterOptions) error {
	if err := safetensors.WriteFile(filepath.Join(dir, AdapterWeightsFile), tensors, map[string]string{"format": "pt"}); err != nil {
		return err
	}
	config := adapterConfig{PeftType: "LORA", TaskType: "CAUSAL_LM", Base: opts.Base, R: lora.Rank, Alpha: lora.Alpha,
		Dropout: lora.Dropout, TargetModules: slices.Sorted(slices.Values(lora.Targets)), RSLoRA: lora.RSLoRA, Bias: "none",
		RankPattern: map[string]any{}, AlphaPattern: map[string]any{}, InitWeights: true, Inference: true}
	raw, err := json.MarshalIndent(config, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, AdapterConfigFile), append(raw, '\n'))
}

// ReadAdapterConfig reads a PEFT adapter folder's adapter_config.json as a LoRA, with its
// base_model_name_or_path. A PEFT feature onegpu does not compute (DoRA, per-module ranks or
// alphas, biases, modules saved whole, layer selection, a target_modules regular expression) is
// an error naming the field.
func ReadAdapterConfig(dir string) (layers.LoRA, string, error) {
	path := filepath.Join(dir, AdapterConfigFile)
	raw, err := regularfile.ReadLinked(path, regularfile.MaxSmallBytes)
	if err != nil {
		return layers.LoRA{}, "", fmt.Errorf("reading the adapter: %w", err)
	}
	var c adapterConfig
	if err := json.Unmarshal(raw, &c); err != nil {
		return layers.LoRA{}, "", fmt.Errorf("reading %s: %w", path, err)
	}
	refuse := func(field string, value any) error {
		return fmt.Errorf("%s: %s is %v: onegpu's LoRA computes adapters without it", path, field, value)
	}
	switch {
	case c.PeftType != "LORA":
		return layers.LoRA{}, "", fmt.Errorf("%s: peft_type %q: onegpu reads LORA adapters", path, c.PeftType)
	case c.DoRA:
		return layers.LoRA{}, "", refuse("use_dora", true)
	case c.Bias != "" && c.Bias != "none":
		return layers.LoRA{}, "", refuse("bias", c.Bias)
	case c.LoRABias:
		return layers.LoRA{}, "", refuse("lora_bias", true)
	case c.FanInFanOut:
		return layers.LoRA{}, "", refuse("fan_in_fan_out", true)
	case len(c.RankPattern) > 0:
		return layers.LoRA{}, "", refuse("rank_pattern", c.RankPattern)
	case len(c.AlphaPattern) > 0:
		return layers.LoRA{}, "", refuse("alpha_pattern", c.AlphaPattern)
	case c.ModulesToSave != nil:
		return layers.LoRA{}, "", refuse("modules_to_save", c.ModulesToSave)
	case c.LayersToXform != nil:
		return layers.LoRA{}, "", refuse("layers_to_transform", c.LayersToXform)
	}
	var targets []string
	switch t := c.TargetModules.(type) {
	case []any:
		for _, name := range t {
			s, ok := name.(string)
			if !ok {
				return layers.LoRA{}, "", fmt.Errorf("%s: target_modules %v: want module names", path, t)
			}
			targets = append(targets, s)
		}
	default:
		return layers.LoRA{}, "", refuse("target_modules", c.TargetModules) // a regular expression, or none
	}
	lora := layers.LoRA{Rank: c.R, Alpha: c.Alpha, Targets: targets, Dropout: c.Dropout, RSLoRA: c.RSLoRA}
	if c.R < 1 {
		return layers.LoRA{}, "", fmt.Errorf("%s: r %d must be positive", path, c.R)
	}
	if err := lora.Validate(); err != nil {
		return layers.LoRA{}, "", fmt.Errorf("%s: %w", path, err)
	}
	return lora, c.Base, nil
}

// LoadAdapter reads a PEFT adapter folder into ctx's adapter variables for the model layout
// describes, creating them in param dtype (existing ones keep theirs) and returns its LoRA
// (ReadAdapterConfig). Everything is checked first, and ctx is left as it was on an error: a
// target the model lacks, a tensor missing or extra (each named), a shape that is not the
// model's: an adapter for another base model.
func LoadAdapter(ctx *context.Context, dir string, layout Layout, param dtypes.DType) (layers.LoRA, error) {
	lora, _, err := ReadAdapterConfig(dir)
	if err != nil {
		return layers.LoRA{}, err
	}
	if _, ok := fileTypes[param]; !ok {
		return layers.LoRA{}, fmt.Errorf("loading an adapter: param dtype %s is not a float dtype", param)
	}
	specs, err := AdapterTensors(layout, lora)
	if err != nil {
		return layers.LoRA{}, fmt.Errorf("adapter %s does not fit the model: %w", dir, err)
	}
	path := filepath.Join(dir, AdapterWeightsFile)
	f, err := safetensors.Open(path)
	if err != nil {
		return layers.LoRA{}, err
	}
	defer f.Close()
	expected := map[string]bool{}
	var items []loadItem
	var problems, missing []string
	for _, spec := range specs {
		expected[peftPrefix+spec.Name] = true
		info, ok := f.Tensor(peftPrefix + spec.Name)
		if !ok {
			missing = append(missing, peftPrefix+spec.Name)
			continue
		}
		if _, ok := variableTypes[info.DType]; !ok {
			problems = append(problems, fmt.Sprintf("tensor %s is %s: onegpu reads F32, BF16, F16 or F64", info.Name, info.DType))
		}
		if !slices.Equal(info.Shape, spec.Shape) {
			problems = append(problems, fmt.Sprintf("tensor %s has shape %v, the model's adapter %v", info.Name, info.Shape, spec.Shape))
		}
		it := loadItem{spec: TensorSpec{info.Name, spec.Shape}, info: info, file: f, dtype: param, variable: lookupVariable(ctx, spec.Name)}
		if v := it.variable; v != nil {
			if !slices.Equal(v.Shape().Dimensions, spec.Shape) {
				problems = append(problems, fmt.Sprintf("variable %s has shape %v, the adapter's %v", v.ScopeAndName(), v.Shape().Dimensions, spec.Shape))
			}
			it.dtype = v.DType()
		}
		items = append(items, it)
	}
	var extra []string
	for _, info := range f.Tensors {
		if !expected[info.Name] {
			extra = append(extra, info.Name)
		}
	}
	if len(missing) > 0 {
		problems = append(problems, fmt.Sprintf("%d adapter tensors are missing: %s", len(missing), list(missing)))
	}
	if len(extra) > 0 {
		problems = append(problems, fmt.Sprintf("%d tensors are not adapters of this model under %s: %s", len(extra), lora, list(extra)))
	}
	if len(problems) > 0 {
		return layers.LoRA{}, fmt.Errorf("adapter %s does not fit the model (nothing was loaded):\n  %s", dir, strings.Join(problems, "\n  "))
	}
	for _, it := range items {
		value := tensors.FromShape(shapes.Make(it.dtype, it.spec.Shape...))
		if err := readTensor(it, value); err != nil {
			return layers.LoRA{}, err
		}
		if it.variable != nil {
			if err := it.variable.SetValue(value); err != nil {
				return layers.LoRA{}, err
			}
			continue
		}
		scope, name := VariableOf(ctx, strings.TrimPrefix(it.spec.Name, peftPrefix))
		scope.Checked(false).VariableWithValue(name, value)
	}
	return lora, nil
}
