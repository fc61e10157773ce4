// Package export lets another framework reproduce a run exactly: a trainer's weights (after
// Trainer.Initialize, the ones its first step sees), the batches of its first steps and its
// configuration are written as NumPy files and JSON, which reference/jax/tutorial.py reads to
// train the same run in JAX/Flax side by side (onegpu compare).
//
//	trainer, err := train.New(backend, config)
//	err = trainer.Initialize()
//	ref, err := export.Write(trainer, "run/", batches, 10) // run/params/..., inputs.npy, labels.npy, config.json
package export

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/data"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/optim"
	"github.com/onegpu/onegpu/quant"
	"github.com/onegpu/onegpu/train"
)

// Reference is the description of an exported run, written as config.json next to the weights
// and the batches. Field names are those reference/jax/tutorial.py reads.
type Reference struct {
	// Model is "gpt", "mlp" or "llama".
	Model      string               `json:"model"`
	GPT        *ReferenceGPT        `json:"gpt,omitempty"`
	Classifier *ReferenceClassifier `json:"classifier,omitempty"`
	Llama      *ReferenceLlama      `json:"llama,omitempty"`
	// Batch examples (sequences) per step, split into MicroBatches equal micro-batches.
	Batch        int `json:"batch"`
	MicroBatches int `json:"micro_batches"`
	// Policy holds the dtype names of params, compute and output ("float32", "bfloat16",
	// "float16", "float64"); SoftmaxDType is the attention softmax's.
	Policy       map[string]string `json:"policy"`
	SoftmaxDType string            `json:"softmax_dtype"`
	// Remat lists the rematerialized blocks ("mlp", "attn", "block"); RematPolicy says what they
	// save, named as in jax.checkpoint_policies.
	Remat       []string `json:"remat"`
	RematPolicy string   `json:"remat_policy"`
	LossScale   string   `json:"loss_scale"`
	// Schedule is optax.warmup_exponential_decay_schedule's arguments.
	Schedule ReferenceSchedule `json:"schedule"`
	// Optimizer is optax's name of the optimizer ("adam", "adamw") and OptimizerParams its
	// arguments by optax's names, for an optimizer with an optax equivalent
	// (optim.OptaxOptimizer); otherwise Optimizer is onegpu's description and OptimizerParams
	// empty. Adam repeats b1, b2 and eps (eps outside the square root) for adam and adamw.
	Optimizer       string             `json:"optimizer"`
	OptimizerParams map[string]float64 `json:"optimizer_params,omitempty"`
	Adam            map[string]float64 `json:"adam,omitempty"`
	Steps           int                `json:"steps"`
	Seed            uint64             `json:"seed"`
	// Params lists every trainable parameter by its Flax path ("block_0/mlp/input_layer/kernel"),
	// stored as params/PATH.npy in float32 whatever the param dtype.
	Params []ReferenceParam `json:"params"`
	// Inputs and Labels are .npy files holding the batches of the steps stacked along a new first
	// axis: step i trains on Inputs[i], Labels[i].
	Inputs string `json:"inputs"`
	Labels string `json:"labels"`
	// Data describes the data, for people.
	Data string `json:"data"`
}

// ReferenceGPT is the GPT's shape.
type ReferenceGPT struct {
	Hidden    int     `json:"hidden_size"`
	Layers    int     `json:"num_layers"`
	HeadDim   int     `json:"head_dim"`
	Heads     int     `json:"num_heads"`
	MLPFactor int     `json:"mlp_expansion"`
	SeqLen    int     `json:"max_seq_len"`
	Vocab     int     `json:"vocab_size"`
	Dropout   float64 `json:"dropout_rate"`
}

// ReferenceLlama is the Llama's shape, by the keys of Hugging Face's config.json (which
// reference/jax/models.py's llama_config reads).
type ReferenceLlama struct {
	Vocab          int                   `json:"vocab_size"`
	Hidden         int                   `json:"hidden_size"`
	Intermediate   int                   `json:"intermediate_size"`
	Layers         int                   `json:"num_hidden_layers"`
	Heads          int                   `json:"num_attention_heads"`
	KVHeads        int                   `json:"num_key_value_heads"`
	HeadDim        int                   `json:"head_dim"`
	MaxPositions   int                   `json:"max_position_embeddings"`
	RopeTheta      float64               `json:"rope_theta"`
	RopeScaling    *ReferenceRopeScaling `json:"rope_scaling"`
	NormEpsilon    float64               `json:"rms_norm_eps"`
	TiedEmbeddings bool                  `json:"tie_word_embeddings"`
}

// ReferenceRopeScaling is Llama 3's rope_scaling as config.json writes it.
type ReferenceRopeScaling struct {
	Type                 string  `json:"rope_type"` // "llama3"
	Factor               float64 `json:"factor"`
	LowFreqFactor        float64 `json:"low_freq_factor"`
	HighFreqFactor       float64 `json:"high_freq_factor"`
	OriginalMaxPositions int     `json:"original_max_position_embeddings"`
}

// ReferenceClassifier is the MLP classifier's shape.
type ReferenceClassifier struct {
	Inputs  int     `json:"inputs"`
	Hidden  int     `json:"hidden_size"`
	Classes int     `json:"num_classes"`
	Dropout float64 `json:"dropout_rate"`
}

// ReferenceSchedule is the learning-rate schedule: optax.warmup_exponential_decay_schedule's
// arguments (see optim.WarmupExponentialDecay; a constant rate is one of them).
type ReferenceSchedule struct {
	Init            float64 `json:"init_value"`
	Peak            float64 `json:"peak_value"`
	WarmupSteps     int     `json:"warmup_steps"`
	TransitionSteps int     `json:"transition_steps"`
	DecayRate       float64 `json:"decay_rate"`
}

// ReferenceParam is one exported parameter.
type ReferenceParam struct {
	Path  string `json:"path"`
	Shape []int  `json:"shape"`
	DType string `json:"dtype"` // the parameter's own dtype; the file is float32
}

// Write writes t's current trainable weights, the batches of steps 0..steps-1 of batches and the
// configuration to dir (created if needed): dir/params/<flax path>.npy, dir/inputs.npy,
// dir/labels.npy and dir/config.json. Call it after t.Initialize (or after any step, to export
// the weights of that moment). It returns what it wrote to config.json.
func Write(t *train.Trainer, dir string, batches data.Data, steps int) (*Reference, error) {
	if steps < 1 {
		return nil, fmt.Errorf("export: %d steps: export at least one", steps)
	}
	c := t.Config
	ref := &Reference{Batch: c.Batch, MicroBatches: c.MicroBatches,
		Policy:      map[string]string{"params": dtypeName(c.Policy.Param), "compute": dtypeName(c.Policy.Compute), "output": dtypeName(c.Policy.Output)},
		Remat:       rematList(c),
		RematPolicy: c.Remat.Policy.String(), LossScale: mixed.DescribeLossScale(c.LossScale),
		Steps: steps, Seed: c.Seed, Inputs: "inputs.npy", Labels: "labels.npy", Data: batches.Describe(), Params: []ReferenceParam{}}
	switch m := c.Model.(type) {
	case models.GPT:
		g := m.Config
		ref.Model, ref.SoftmaxDType = "gpt", dtypeName(dtypes.Float32)
		if m.SoftmaxDType != dtypes.InvalidDType {
			ref.SoftmaxDType = dtypeName(m.SoftmaxDType)
		}
		ref.GPT = &ReferenceGPT{Hidden: g.Hidden, Layers: g.Layers, HeadDim: g.HeadDim, Heads: g.Heads(), MLPFactor: g.MLPFactor,
			SeqLen: g.SeqLen, Vocab: g.Vocab, Dropout: g.Dropout}
	case models.Classifier:
		k := m.Config
		ref.Model, ref.SoftmaxDType = "mlp", dtypeName(dtypes.Float32)
		ref.Classifier = &ReferenceClassifier{Inputs: k.Inputs, Hidden: k.Hidden, Classes: k.Classes, Dropout: k.Dropout}
	case models.Llama:
		l := m.Config
		ref.Model, ref.SoftmaxDType = "llama", dtypeName(dtypes.Float32)
		if m.SoftmaxDType != dtypes.InvalidDType {
			ref.SoftmaxDType = dtypeName(m.SoftmaxDType)
		}
		ref.Llama = &ReferenceLlama{Vocab: l.Vocab, Hidden: l.Hidden, Intermediate: l.Intermediate, Layers: l.Layers, Heads: l.Heads,
			KVHeads: l.KVHeads, HeadDim: l.HeadDim, MaxPositions: l.MaxPositions, RopeTheta: l.RopeTheta, NormEpsilon: l.NormEpsilon,
			TiedEmbeddings: l.TiedEmbeddings}
		if r := l.RopeScaling; r != nil {
			ref.Llama.RopeScaling = &ReferenceRopeScaling{Type: "llama3", Factor: r.Factor, LowFreqFactor: r.LowFreqFactor,
				HighFreqFactor: r.HighFreqFactor, OriginalMaxPositions: r.OriginalMaxPositions}
		}
	default:
		return nil, fmt.Errorf("export: the JAX reference has the tutorial's gpt and mlp and the llama, not the model %T", c.Model)
	}
	switch s := c.Schedule.(type) {
	case optim.WarmupExponentialDecaySchedule:
		ref.Schedule = ReferenceSchedule{Init: s.Init, Peak: s.Peak, WarmupSteps: s.WarmupSteps, TransitionSteps: s.TransitionSteps, DecayRate: s.DecayRate}
	case optim.ConstantSchedule: // optax's warmup_exponential_decay_schedule with these arguments is constant
		ref.Schedule = ReferenceSchedule{Init: s.LearningRate, Peak: s.LearningRate, TransitionSteps: 1, DecayRate: 1}
	default:
		return nil, fmt.Errorf("export: the JAX reference's learning rate is a warm-up/exponential decay or a constant, not %s", c.Schedule)
	}
	opt := c.Optimizer
	if opt == nil {
		opt = optim.Adam().Done()
	}
	ref.Optimizer = opt.String()
	if o, ok := opt.(optim.OptaxOptimizer); ok {
		ref.Optimizer, ref.OptimizerParams = o.Optax()
		ref.Adam = map[string]float64{"b1": ref.OptimizerParams["b1"], "b2": ref.OptimizerParams["b2"], "eps": ref.OptimizerParams["eps"]}
	}
	if err := os.MkdirAll(filepath.Join(dir, "params"), 0o755); err != nil {
		return nil, err
	}
	for v := range t.Ctx.IterVariables() {
		if !v.Trainable {
			continue
		}
		if !v.HasValue() {
			return nil, fmt.Errorf("export: variable %s has no value: call Initialize first", v.ScopeAndName())
		}
		path := flaxPath(v.Scope(), v.Name())
		value, err := v.Value()
		if err != nil {
			return nil, fmt.Errorf("export: reading %s: %w", path, err)
		}
		asF32, err := toFloat32(value)
		if err != nil {
			return nil, fmt.Errorf("export: %s: %w", path, err)
		}
		file := filepath.Join(dir, "params", filepath.FromSlash(path)+".npy")
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			return nil, err
		}
		if err := data.WriteNPYFile(file, asF32); err != nil {
			return nil, err
		}
		ref.Params = append(ref.Params, ReferenceParam{Path: path, Shape: v.Shape().Dimensions, DType: dtypeName(v.DType())})
	}
	if len(ref.Params) == 0 {
		return nil, fmt.Errorf("export: the context has no trainable variables: call Initialize first")
	}
	sort.Slice(ref.Params, func(i, j int) bool { return ref.Params[i].Path < ref.Params[j].Path })
	stepBatches := make([][]*tensors.Tensor, steps)
	for i := range steps {
		stepBatches[i] = batches.Batch(i)
	}
	for k, name := range []string{ref.Inputs, ref.Labels} {
		parts := make([]*tensors.Tensor, steps)
		for i := range steps {
			parts[i] = stepBatches[i][k]
		}
		stacked, err := stack(parts)
		if err != nil {
			return nil, fmt.Errorf("export: %s: %w", name, err)
		}
		if err := data.WriteNPYFile(filepath.Join(dir, name), stacked); err != nil {
			return nil, err
		}
	}
	blob, err := json.MarshalIndent(ref, "", "  ")
	if err != nil {
		return nil, err
	}
	return ref, os.WriteFile(filepath.Join(dir, "config.json"), append(blob, '\n'), 0o644)
}

// flaxPath turns a variable's context scope and name into the path Flax gives the parameter:
// scope "/block_0/mlp/input_layer" and name "kernel" are "block_0/mlp/input_layer/kernel".
func flaxPath(scope, name string) string {
	scope = strings.Trim(scope, context.ScopeSeparator)
	if scope == "" {
		return name
	}
	return scope + "/" + name
}

// rematList is the kinds of block rematerialized, never nil (JSON's []).
func rematList(c train.Config) []string {
	return append([]string{}, c.Remat.Kinds...)
}

// dtypeName is NumPy's name of a float dtype.
func dtypeName(d dtypes.DType) string {
	switch d {
	case dtypes.Float32:
		return "float32"
	case dtypes.BFloat16:
		return "bfloat16"
	case dtypes.Float16:
		return "float16"
	case dtypes.Float64:
		return "float64"
	}
	return strings.ToLower(d.String())
}

// toFloat32 returns a float32 copy of a float tensor (exact for bfloat16 and float16; float64 is
// rounded).
func toFloat32(t *tensors.Tensor) (*tensors.Tensor, error) {
	values, err := quant.Float32Values(t)
	if err != nil {
		return nil, err
	}
	return tensors.FromFlatDataAndDimensions(values, t.Shape().Dimensions...), nil
}

// stack joins tensors of one shape and dtype along a new first axis.
func stack(parts []*tensors.Tensor) (*tensors.Tensor, error) {
	first := parts[0].Shape()
	for _, p := range parts[1:] {
		if !p.Shape().Equal(first) {
			return nil, fmt.Errorf("batches of different shapes: %s and %s", first, p.Shape())
		}
	}
	dims := append([]int{len(parts)}, first.Dimensions...)
	switch first.DType {
	case dtypes.Float32:
		return stackAs[float32](parts, dims), nil
	case dtypes.Int32:
		return stackAs[int32](parts, dims), nil
	case dtypes.Int64:
		return stackAs[int64](parts, dims), nil
	case dtypes.Float64:
		return stackAs[float64](parts, dims), nil
	}
	return nil, fmt.Errorf("cannot export batches of dtype %s", first.DType)
}

func stackAs[T float32 | float64 | int32 | int64](parts []*tensors.Tensor, dims []int) *tensors.Tensor {
	var all []T
	for _, p := range parts {
		tensors.MustConstFlatData[T](p, func(flat []T) { all = append(all, flat...) })
	}
	return tensors.FromFlatDataAndDimensions(all, dims...)
}
