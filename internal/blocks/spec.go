package blocks

import (
	"fmt"
	"strings"
)

// Spec says which parts of a transformer block to checkpoint, in the tutorial's terms: none, the
// MLP, the attention, both (each checkpointed on its own), or the whole block at once.
// The zero Spec checkpoints nothing.
type Spec struct {
	// MLP checkpoints each block's MLP sublayer (LayerNorm, expansion, activation, projection).
	MLP bool
	// Attention checkpoints each block's attention sublayer.
	Attention bool
	// Block checkpoints each whole block (attention and MLP) as one function: the backward pass
	// keeps one value per block instead of two, and recomputes a longer forward.
	Block bool
}

// specParts are the words ParseSpec accepts.
var specParts = []string{"none", "mlp", "attn", "block"}

// ParseSpec reads a spec: "none", "mlp", "attn", "mlp,attn" (in either order) or "block".
// "attention" is accepted for "attn" and "" for "none". Errors name the part that is wrong and the
// accepted values.
func ParseSpec(s string) (Spec, error) {
	var spec Spec
	seenNone := false
	for _, part := range strings.Split(s, ",") {
		switch p := strings.TrimSpace(part); p {
		case "none", "":
			seenNone = true
		case "mlp":
			spec.MLP = true
		case "attn", "attention":
			spec.Attention = true
		case "block":
			spec.Block = true
		default:
			return Spec{}, fmt.Errorf("remat spec %q: unknown part %q; the parts are %s (e.g. \"mlp,attn\")",
				s, p, strings.Join(specParts, ", "))
		}
	}
	switch {
	case seenNone && spec != (Spec{}):
		return Spec{}, fmt.Errorf("remat spec %q: \"none\" cannot be combined with other parts", s)
	case spec.Block && (spec.MLP || spec.Attention):
		return Spec{}, fmt.Errorf("remat spec %q: \"block\" already checkpoints the attention and the MLP together; "+
			"use \"block\" alone, or \"mlp,attn\" to checkpoint them separately", s)
	}
	return spec, nil
}

// None reports whether the spec checkpoints nothing.
func (s Spec) None() bool { return s == Spec{} }

// String returns the spec as ParseSpec reads it: "none", "mlp", "attn", "mlp,attn" or "block".
func (s Spec) String() string {
	var parts []string
	if s.Block {
		parts = append(parts, "block")
	}
	if s.MLP {
		parts = append(parts, "mlp")
	}
	if s.Attention {
		parts = append(parts, "attn")
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ",")
}

// Kinds returns the kinds of block (see remat.Block) the spec selects in a transformer that marks its
// attention "attn", its MLP "mlp" and the whole block "block", as the GPT of package models does.
func (s Spec) Kinds() []string {
	var kinds []string
	if s.Block {
		kinds = append(kinds, "block")
	}
	if s.MLP {
		kinds = append(kinds, "mlp")
	}
	if s.Attention {
		kinds = append(kinds, "attn")
	}
	return kinds
}
