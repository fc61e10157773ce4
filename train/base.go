package train

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"maps"
	"slices"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/quant"
)

// A LoRA run's frozen base is made once, before its first step or its resume: from the weights
// SetWeights gave (a Hugging Face folder) or from the seed, named by the SHA-256 of its weights
// (baseSHA256), then quantized when the run asks (QLoRA). Checkpoints record the hash and hold no
// copy of the base (checkpoint.Folder.CheckBase): a resumed run makes the base again the same way
// and is refused when the hash differs.

// base is what a trainer knows of its LoRA run's frozen base once it is made.
type base struct {
	sha256, from string
}

// prepareBase makes the run's frozen base, once: the weights SetWeights gave, or the seed's (the
// step built once without quantization and its variables initialized), hashed, then quantized
// when LoRA.Quantize asks (layers.QuantizeWeights). It does nothing without LoRA.
func (t *Trainer) prepareBase() error {
	lora := t.Config.LoRA
	if !lora.Active() || t.base != nil {
		return nil
	}
	from := cmp.Or(t.BaseSource, "weights set by SetWeights")
	if !t.hasWeights() {
		// The float weights from the seed: the step built without quantization, initialized.
		if t.embedding().on {
			if err := t.createTable(); err != nil {
				return err
			}
		}
		t.Config.LoRA.Quantize = quant.Config{}
		p, err := analysis.ContextProgram(t.Backend, t.Ctx, "initialize_base", t.StepShapes(), t.StepFn())
		t.Config.LoRA = lora
		if err != nil {
			return fmt.Errorf("building the base model: %w", err)
		}
		p.Graph.Finalize()
		if err := t.Ctx.InitializeVariables(t.Backend, nil); err != nil {
			return fmt.Errorf("initializing the base model: %w", err)
		}
		t.Ctx = t.Ctx.Checked(false)
		if t.Config.Offload == OffloadParams {
			// The streamed step keeps the weights in host memory, where its host engine reads them.
			for v := range t.Ctx.IterVariables() {
				if value, err := v.Value(); err == nil {
					if err := value.ToLocal(); err != nil {
						return err
					}
				}
			}
		}
		from = fmt.Sprintf("the seed %d", t.Config.Seed)
	}
	sum, err := baseSHA256(t.Ctx)
	if err != nil {
		return err
	}
	if lora.Quantize.Format != "" {
		n, err := layers.QuantizeWeights(t.Ctx, lora)
		if err != nil {
			return err
		}
		if n == 0 {
			return nothingQuantized(lora)
		}
	}
	t.base = &base{sha256: sum, from: from}
	return nil
}

// nothingQuantized is the error of a QLoRA run whose base has no weight of its targets.
func nothingQuantized(lora layers.LoRA) error {
	return fmt.Errorf("Config.LoRA.Quantize: the model has no weight of the targets %s to quantize", strings.Join(lora.Resolved().Targets, ", "))
}

// hasWeights reports whether the context holds any of the model's weights with a value.
func (t *Trainer) hasWeights() bool {
	for v := range t.Ctx.IterVariables() {
		if v.Name() == "weight" && v.Shape().Rank() == 2 && !layers.IsAdapter(v) {
			if _, err := v.Value(); err == nil {
				return true
			}
		}
	}
	return false
}

// baseVersion names the way baseSHA256 hashes, so that a change of it is never taken for another
// base.
const baseVersion = "onegpu base v1"

// baseSHA256 is the SHA-256 of the base's weights in ctx: every weight (graph.IsWeight) that is
// not an adapter, in the order of their names, each as its name, dtype and dimensions on a line
// and then its bytes (little-endian, as a checkpoint stores them). A base's hash is that of the
// weights as the run holds them before quantization: the same Hugging Face folder in the same
// dtype, or the same seed, gives the same hash, whether the base was hashed whole or as it was
// loaded (SetBase: the same bytes in the same order).
func baseSHA256(ctx *context.Context) (string, error) {
	byName := map[string]*context.Variable{}
	for v := range ctx.IterVariables() {
		if analysis.IsWeight(ctx, v) && !layers.IsAdapter(v) {
			byName[v.ScopeAndName()] = v
		}
	}
	h := newBaseHash()
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		value, err := byName[name].Value()
		if err == nil {
			err = h.add(name, value)
		}
		if err != nil {
			return "", fmt.Errorf("hashing the base: %s: %w", name, err)
		}
	}
	return h.sum(), nil
}

// baseHash computes baseSHA256 one weight at a time, in the order of their names.
type baseHash struct {
	h    hash.Hash
	last string // the name of the weight added last
	n    int    // weights added
}

func newBaseHash() *baseHash {
	h := &baseHash{h: sha256.New()}
	fmt.Fprintln(h.h, baseVersion)
	return h
}

// add hashes the weight name's value: its name, dtype and dimensions on a line, then its bytes.
// Names must come in increasing order (the hash's definition).
func (b *baseHash) add(name string, value *tensors.Tensor) error {
	if b.n > 0 && name <= b.last {
		return fmt.Errorf("weight %s comes after %s: the base is hashed in the order of its weights' names", name, b.last)
	}
	b.last, b.n = name, b.n+1
	fmt.Fprintf(b.h, "%s %s %v\n", name, value.Shape().DType, value.Shape().Dimensions)
	return value.ConstBytes(func(bytes []byte) { b.h.Write(bytes) })
}

func (b *baseHash) sum() string { return hex.EncodeToString(b.h.Sum(nil)) }

// BaseSHA256 is the SHA-256 of a LoRA run's frozen base that its checkpoints record (of its
// weights before quantization, in the order of their names), once the base is made (by SetBase,
// Initialize, Run or the first Step); "" before and without LoRA.
func (t *Trainer) BaseSHA256() string {
	if t.base == nil {
		return ""
	}
	return t.base.sha256
}

// BaseWeights takes a LoRA run's frozen base one weight at a time as it is loaded (SetBase): it
// hashes each into the base's SHA-256 and quantizes the weights the run stores quantized, so that
// the base is never in memory whole in full precision (a 70B's bfloat16 weights are 141 GB; their
// NF4 codes 36 GB). It is an hf.Sink: hf.OpenWith(ctx, dir, hf.Options{..., Sink: b}).
type BaseWeights struct {
	quantize layers.QuantizingSink
	hash     *baseHash
	added    map[string]bool // the weights added, by full name (Variable.ScopeAndName)
	parts    map[string]bool // the quantized parts made, by full name
	taken    int             // the weights quantized
}

// Takes reports whether the run stores the weight name of scope quantized (a targeted
// projection's, under LoRA.Quantize): its value goes to Add alone, and no float variable is made
// of it.
func (b *BaseWeights) Takes(scope *context.Context, name string, shape shapes.Shape) bool {
	return b.quantize.Takes(scope, name, shape)
}

// Add takes the next weight of the base, name in scope, in the order of the weights' full names:
// it hashes value into the base's SHA-256 and, for a weight Takes takes, stores its quantized
// parts in scope (layers.QuantizingSink). A weight out of order is an error (the hash is defined
// in name order), as is one that cannot be quantized (a non-finite value).
func (b *BaseWeights) Add(scope *context.Context, name string, value *tensors.Tensor) error {
	path := context.JoinScope(scope.Scope(), name)
	if err := b.hash.add(path, value); err != nil {
		return err
	}
	b.added[path] = true
	if !b.Takes(scope, name, value.Shape()) {
		return nil
	}
	if err := b.quantize.Add(scope, name, value); err != nil {
		return err
	}
	for v := range scope.In(layers.QuantizedScope).IterVariablesInScope() {
		b.parts[v.ScopeAndName()] = true
	}
	b.taken++
	return nil
}
