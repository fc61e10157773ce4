package remat

import (
	"fmt"
	"slices"
	"strings"
)

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
