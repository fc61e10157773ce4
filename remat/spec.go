package remat

import (
	"fmt"
	"slices"
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

// Kinds returns the kinds of block (see Block) the spec selects in a transformer that marks its
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

// ParseKinds reads the kinds of block to rematerialize (see Block and SetBlocks) as a command line
// writes them: "none" (or "") for none, or a comma-separated list of the kinds a model marks, e.g.
// "mlp,attn" or "block"; "attention" reads as "attn". "none" combines with nothing, and "block"
// (a transformer's whole block, which holds its attention and its MLP) not with "mlp" or "attn".
// The kinds come back once each, in the order KindsString writes them. Whether a model has them
// is checked where the model is known (a trainer refuses a kind its model does not mark).
func ParseKinds(s string) ([]string, error) {
	seen := map[string]bool{}
	var kinds []string
	for _, part := range strings.Split(s, ",") {
		p := strings.TrimSpace(part)
		switch p {
		case "none", "":
			seen["none"] = true
			continue
		case "attention":
			p = "attn"
		}
		for _, r := range p {
			if !(r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
				return nil, fmt.Errorf("remat %q: %q is not a kind of block (letters, digits, _ and -), e.g. \"mlp,attn\" or \"block\"", s, p)
			}
		}
		if !seen[p] {
			seen[p] = true
			kinds = append(kinds, p)
		}
	}
	switch {
	case seen["none"] && len(kinds) > 0:
		return nil, fmt.Errorf("remat %q: \"none\" cannot be combined with other kinds", s)
	case seen["block"] && (seen["mlp"] || seen["attn"]):
		return nil, fmt.Errorf("remat %q: \"block\" already checkpoints the attention and the MLP together; "+
			"use \"block\" alone, or \"mlp,attn\" to checkpoint them separately", s)
	}
	sortKinds(kinds)
	return kinds, nil
}

// KindsString writes kinds as ParseKinds reads them: "none" for none, else the kinds separated by
// commas in a fixed order: block, mlp and attn first (the tutorial's words), then the others sorted.
func KindsString(kinds []string) string {
	if len(kinds) == 0 {
		return "none"
	}
	sorted := slices.Clone(kinds)
	sortKinds(sorted)
	return strings.Join(slices.Compact(sorted), ",")
}

// sortKinds puts kinds in KindsString's order.
func sortKinds(kinds []string) {
	rank := func(k string) int {
		if i := slices.Index([]string{"block", "mlp", "attn"}, k); i >= 0 {
			return i
		}
		return 3
	}
	slices.SortStableFunc(kinds, func(a, b string) int {
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra - rb
		}
		return strings.Compare(a, b)
	})
}
