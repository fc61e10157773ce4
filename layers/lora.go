package layers

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/context/initializers"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/quant"
)

// LoRA describes low-rank adapters on a model's projections (Hu et al. 2021, "LoRA"), as Hugging
// Face's PEFT adds them: a targeted projection computes
//
//	y = x·Wᵀ + s·(dropout(x)·Aᵀ)·Bᵀ
//
// with A [Rank, in] and B [features, Rank] trained and the base weight W frozen, s = Alpha/Rank
// (Alpha/√Rank with RSLoRA). A starts Kaiming-uniform as PEFT's (bounds ±1/√in), B at zero, so
// that the adapted model starts as the base model, bit for bit. The zero value (Rank 0) adapts
// nothing. Set it on a context with SetLoRA; Linear reads it.
type LoRA struct {
	// Rank is the adapters' inner dimension r (at least 1, at most the smaller side of every
	// targeted matrix).
	Rank int
	// Alpha scales the adapters' product by Alpha/Rank (PEFT's lora_alpha; default 8, PEFT's).
	Alpha float64
	// Targets are the projections adapted, by the name of their scope: "q_proj", "k_proj",
	// "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj" in the Llama and Qwen2 families
	// (PEFT's target_modules; default q_proj and v_proj, PEFT's default for them).
	Targets []string
	// Dropout is the rate of the dropout applied to the adapters' input while training (PEFT's
	// lora_dropout; default 0).
	Dropout float64
	// RSLoRA scales by Alpha/√Rank instead (Kalajdzievski 2023, PEFT's use_rslora).
	RSLoRA bool
	// DType is the adapters' variables' dtype; the zero value is the policy's param dtype.
	DType dtypes.DType
	// Quantize stores the targeted projections' frozen weights in a block code (quant.QLoRA()
	// for QLoRA's NF4); the zero value keeps them as float variables. The codes are variables of
	// the projection's scope "quantized" (quant.Layout.Parts' names), made from a float weight by
	// QuantizeWeights, and dequantized to the compute dtype inside the product, forward and again
	// backward, so that no full-precision copy outlives the product.
	Quantize quant.Config
}

// DefaultLoRAAlpha is PEFT's default lora_alpha.
const DefaultLoRAAlpha = 8

// DefaultLoRATargets are PEFT's default target_modules for the Llama and Qwen2 families.
var DefaultLoRATargets = []string{"q_proj", "v_proj"}

// loraShortNames are the short target names the text form accepts, and their projections.
var loraShortNames = map[string]string{"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj",
	"gate": "gate_proj", "up": "up_proj", "down": "down_proj"}

// ParseLoRA reads LoRA's text form, comma-separated: rank=R (required), alpha=A, targets=T[,T...]
// (a projection's scope name or its short name: q, k, v, o, gate, up, down; the names after
// targets= run to the next key), dropout=P, rslora. For example
// "rank=16,alpha=32,targets=q,k,v,o,gate,up,down,dropout=0.05".
func ParseLoRA(s string) (LoRA, error) {
	var l LoRA
	inTargets := false
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		key, value, hasValue := strings.Cut(item, "=")
		if !hasValue {
			switch {
			case item == "rslora":
				l.RSLoRA, inTargets = true, false
			case inTargets && item != "":
				l.Targets = append(l.Targets, targetName(item))
			default:
				return LoRA{}, fmt.Errorf("lora: %q is not key=value or rslora (in %q): want rank=R[,alpha=A][,targets=T,...][,dropout=P][,rslora]", item, s)
			}
			continue
		}
		inTargets = false
		var err error
		switch key {
		case "rank", "r":
			l.Rank, err = strconv.Atoi(value)
		case "alpha":
			l.Alpha, err = strconv.ParseFloat(value, 64)
		case "dropout":
			l.Dropout, err = strconv.ParseFloat(value, 64)
		case "targets":
			inTargets = true
			if value != "" {
				l.Targets = append(l.Targets, targetName(value))
			}
		default:
			return LoRA{}, fmt.Errorf("lora: unknown key %q in %q: want rank, alpha, targets, dropout or rslora", key, s)
		}
		if err != nil {
			return LoRA{}, fmt.Errorf("lora: %s=%q is not a number", key, value)
		}
	}
	if l.Rank == 0 {
		return LoRA{}, fmt.Errorf("lora: %q has no rank: want rank=R, e.g. rank=16", s)
	}
	l = l.Resolved()
	return l, l.Validate()
}

// targetName expands a short target name (q, gate, ...) to its projection's.
func targetName(s string) string {
	if long, ok := loraShortNames[s]; ok {
		return long
	}
	return s
}

// Resolved returns l with its defaults filled in (Alpha, Targets) when it adapts anything.
func (l LoRA) Resolved() LoRA {
	if l.Rank == 0 {
		return l
	}
	if l.Alpha == 0 {
		l.Alpha = DefaultLoRAAlpha
	}
	if len(l.Targets) == 0 {
		l.Targets = slices.Clone(DefaultLoRATargets)
	}
	return l
}

// Validate reports a LoRA that cannot be used, naming the field. A rank too large for a matrix
// is found where the matrix is known (CheckProjection).
func (l LoRA) Validate() error {
	switch {
	case l.Rank < 0:
		return fmt.Errorf("lora: LoRA.Rank %d must be positive", l.Rank)
	case l.Rank == 0:
		return nil
	case !(l.Alpha > 0) || math.IsInf(l.Alpha, 0):
		return fmt.Errorf("lora: LoRA.Alpha %g must be positive and finite", l.Alpha)
	case !(l.Dropout >= 0 && l.Dropout < 1):
		return fmt.Errorf("lora: LoRA.Dropout %g must be in [0, 1)", l.Dropout)
	case l.DType != dtypes.InvalidDType && !l.DType.IsFloat():
		return fmt.Errorf("lora: LoRA.DType %s is not a float dtype", l.DType)
	}
	for i, t := range l.Targets {
		if t == "" || strings.Contains(t, context.ScopeSeparator) || slices.Contains(l.Targets[:i], t) {
			return fmt.Errorf("lora: LoRA.Targets %q: each target is a projection's scope name (q_proj, ...), once", l.Targets)
		}
	}
	if l.Quantize.Format != "" {
		return l.Quantize.Validate()
	}
	return nil
}

// Active reports whether l adapts anything.
func (l LoRA) Active() bool { return l.Rank > 0 }

// Targeted reports whether l adapts the projection of scope name (its last scope element).
func (l LoRA) Targeted(name string) bool {
	return l.Active() && slices.Contains(l.Resolved().Targets, name)
}

// Scaling is the factor of the adapters' product: Alpha/Rank, or Alpha/√Rank with RSLoRA.
func (l LoRA) Scaling() float64 {
	l = l.Resolved()
	if l.RSLoRA {
		return l.Alpha / math.Sqrt(float64(l.Rank))
	}
	return l.Alpha / float64(l.Rank)
}

// CheckProjection reports a rank the projection from in to features cannot take.
func (l LoRA) CheckProjection(name string, in, features int) error {
	if l.Rank > min(in, features) {
		return fmt.Errorf("lora: LoRA.Rank %d is larger than %s's matrix [%d, %d] (at most %d)", l.Rank, name, features, in, min(in, features))
	}
	return nil
}

// String is l's text form (ParseLoRA reads it back), or "" when it adapts nothing.
func (l LoRA) String() string {
	if !l.Active() {
		return ""
	}
	l = l.Resolved()
	s := fmt.Sprintf("rank=%d,alpha=%g,targets=%s", l.Rank, l.Alpha, strings.Join(l.Targets, ","))
	if l.Dropout != 0 {
		s += fmt.Sprintf(",dropout=%g", l.Dropout)
	}
	if l.RSLoRA {
		s += ",rslora"
	}
	return s
}

const loraParam = "onegpu_lora"

// SetLoRA sets the adapters of the projections in ctx's scope and below.
func SetLoRA(ctx *context.Context, l LoRA) { ctx.SetParam(loraParam, l) }

// LoRAOf returns the LoRA set on ctx's scope or above; none (the zero LoRA) when none was set.
func LoRAOf(ctx *context.Context) LoRA {
	return context.GetParamOr(ctx, loraParam, LoRA{})
}

// Adapter names: a targeted projection's scope holds its adapters in sub-scopes named as PEFT
// names its modules, each with a variable "weight": q_proj/lora_A/weight [Rank, in] and
// q_proj/lora_B/weight [features, Rank].
const (
	LoRAAName = "lora_A"
	LoRABName = "lora_B"
)

// IsAdapter reports whether v is a LoRA adapter's weight (not its optimizer state, which an
// optimizer may keep under a scope of the same path).
func IsAdapter(v *context.Variable) bool {
	if v.Name() != "weight" {
		return false
	}
	scope := strings.TrimSuffix(v.Scope(), context.ScopeSeparator)
	return strings.HasSuffix(scope, context.ScopeSeparator+LoRAAName) || strings.HasSuffix(scope, context.ScopeSeparator+LoRABName)
}

// FreezeBase marks every trainable variable of ctx but the adapters a frozen weight
// (graph.FreezeVariable): under LoRA the base model gets no gradient and no optimizer state.
// Call it after the model's forward pass is built (its variables exist) and before the gradients
// are, on every build.
func FreezeBase(ctx *context.Context) {
	for v := range ctx.IterVariables() {
		if v.Trainable && !IsAdapter(v) {
			analysis.FreezeVariable(ctx, v)
		}
	}
}

// delta returns s·(dropout(x)·Aᵀ)·Bᵀ for the adapters of the projection in scope ctx,
// creating them (A Kaiming-uniform, B zero) when they do not exist.
func (l LoRA) delta(ctx *context.Context, x *graph.Node, features int) *graph.Node {
	in := x.Shape().Dim(-1)
	name := lastScope(ctx)
	if err := l.CheckProjection(name, in, features); err != nil {
		panic(err.Error())
	}
	dtype := l.DType
	if dtype == dtypes.InvalidDType {
		dtype = mixed.PolicyOf(ctx).Param
	}
	g := x.Graph()
	// PEFT: nn.init.kaiming_uniform_(A, a=√5), a bound of gain·√(3/in) with gain √(2/(1+5)).
	a := UniformVariable(ctx.In(LoRAAName), "weight", shapes.Make(dtype, l.Rank, in), 1/math.Sqrt(float64(in))).ValueGraph(g)
	b := ctx.In(LoRABName).WithInitializer(initializers.Zero).VariableWithShape("weight", shapes.Make(dtype, features, l.Rank)).ValueGraph(g)
	h := LinearWith(ctx.In(LoRAAName), Dropout(ctx, x, l.Dropout), a)
	d := LinearWith(ctx.In(LoRABName), h, b)
	return graph.MulScalar(d, l.Scaling())
}

// lastScope is the last element of ctx's scope: a projection's name.
func lastScope(ctx *context.Context) string {
	scope := strings.TrimSuffix(ctx.Scope(), context.ScopeSeparator)
	return scope[strings.LastIndex(scope, context.ScopeSeparator)+1:]
}
