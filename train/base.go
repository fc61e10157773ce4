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
			return fmt.Errorf("Config.LoRA.Quantize: the model has no weight of the targets %s to quantize", strings.Join(lora.Resolved().Targets, ", "))
		}
	}
	t.base = &base{sha256: sum, from: from}
	return nil
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
// dtype, or the same seed, gives the same hash.
func baseSHA256(ctx *context.Context) (string, error) {
	byName := map[string]*context.Variable{}
	for v := range ctx.IterVariables() {
		if analysis.IsWeight(ctx, v) && !layers.IsAdapter(v) {
			byName[v.ScopeAndName()] = v
		}
	}
	h := sha256.New()
	fmt.Fprintln(h, baseVersion)
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		if err := hashVariable(h, name, byName[name]); err != nil {
			return "", fmt.Errorf("hashing the base: %w", err)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// hashVariable writes v's name, shape and bytes to h.
func hashVariable(h hash.Hash, name string, v *context.Variable) error {
	value, err := v.Value()
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	fmt.Fprintf(h, "%s %s %v\n", name, v.Shape().DType, v.Shape().Dimensions)
	return value.ConstBytes(func(b []byte) { h.Write(b) })
}
