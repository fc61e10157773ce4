package remat

import (
	"fmt"
	"slices"
	"strings"
)

// Tag describes a value tagged inside a checkpointed function (with Name, NameDot or
// NameBatchedDot): what a Policy looks at to decide whether the backward pass keeps the value from
// the forward pass instead of recomputing it.
type Tag struct {
	// Name is the name given to the value; empty for a product tagged without a name.
	Name string
	// Dot marks the output of a matrix multiplication (graph.Dot, DotGeneral, Einsum).
	Dot bool
	// BatchDims marks a product with batch dimensions in DotGeneral's sense: axes that both
	// operands carry and the product keeps, such as attention's per-head scores
	// "bqhd,bkhd->bhqk". A product with weights ("btd,df->btf") has none.
	BatchDims bool
}

// Policy decides which tagged values of a checkpointed function are saved from the forward pass;
// everything else is recomputed during the backward pass. It mirrors jax.checkpoint_policies.
// Policies are values: combine them with SaveFromBoth, print them with String and read them back
// with ParsePolicy.
//
// The zero Policy is NothingSaveable.
type Policy struct {
	name string
	// saves decides for one tagged value; nil saves none.
	saves func(Tag) bool
	// everything saves every value of the function, tagged or not: the function is not
	// rematerialized at all.
	everything bool
}

// Saves reports whether p keeps a value tagged with t from the forward pass.
func (p Policy) Saves(t Tag) bool {
	return p.everything || p.saves != nil && p.saves(t)
}

// SavesEverything reports whether p keeps every value, tagged or not (EverythingSaveable, alone or
// combined): a function checkpointed with it runs as if it were not checkpointed.
func (p Policy) SavesEverything() bool { return p.everything }

// String returns the policy in the syntax ParsePolicy reads, e.g. "dots_saveable" or
// "save_only_these_names:attn_out,mlp_out".
func (p Policy) String() string {
	if p.name == "" {
		return "nothing_saveable"
	}
	return p.name
}

// Predefined policies, named as in jax.checkpoint_policies.
var (
	// NothingSaveable saves nothing: the whole function is recomputed in the backward pass, which
	// keeps only the function's inputs. The default.
	NothingSaveable = Policy{name: "nothing_saveable"}

	// EverythingSaveable saves every value: the function is not rematerialized at all. Useful to
	// compare, and to list what a function's backward pass keeps (see Residuals).
	EverythingSaveable = Policy{name: "everything_saveable", everything: true}

	// DotsSaveable saves the outputs of matrix multiplications tagged with NameDot or
	// NameBatchedDot, and recomputes the elementwise work between them.
	DotsSaveable = Policy{name: "dots_saveable", saves: func(t Tag) bool { return t.Dot }}

	// DotsWithNoBatchDimsSaveable saves the products tagged with NameDot (products with weights)
	// but not those tagged with NameBatchedDot (attention scores and their weighted sums, which
	// grow with the square of the sequence length).
	DotsWithNoBatchDimsSaveable = Policy{name: "dots_with_no_batch_dims_saveable",
		saves: func(t Tag) bool { return t.Dot && !t.BatchDims }}
)

// SaveOnlyTheseNames saves the values tagged with one of names, like
// jax.checkpoint_policies.save_only_these_names.
func SaveOnlyTheseNames(names ...string) Policy {
	set := nameSet(names)
	return Policy{name: namedPolicy("save_only_these_names", names), saves: func(t Tag) bool { return set[t.Name] }}
}

// SaveAnyNamesButThese saves every value tagged with a name except those named in names, like
// jax.checkpoint_policies.save_any_names_but_these. Products tagged without a name are not saved.
func SaveAnyNamesButThese(names ...string) Policy {
	set := nameSet(names)
	return Policy{name: namedPolicy("save_any_names_but_these", names),
		saves: func(t Tag) bool { return t.Name != "" && !set[t.Name] }}
}

// SaveFromBoth saves what either policy saves, like jax.checkpoint_policies.save_from_both_policies.
func SaveFromBoth(a, b Policy) Policy {
	return Policy{
		name:       a.String() + "+" + b.String(),
		saves:      func(t Tag) bool { return a.Saves(t) || b.Saves(t) },
		everything: a.everything || b.everything,
	}
}

func nameSet(names []string) map[string]bool {
	set := make(map[string]bool, len(names))
	for _, n := range names {
		set[n] = true
	}
	return set
}

func namedPolicy(kind string, names []string) string {
	return kind + ":" + strings.Join(names, ",")
}

// policyNames are the policies ParsePolicy knows, as they are written.
var policyNames = []string{
	"nothing_saveable", "everything_saveable", "dots_saveable", "dots_with_no_batch_dims_saveable",
	"save_only_these_names:NAME,...", "save_any_names_but_these:NAME,...",
}

// ParsePolicy reads a policy written as by Policy.String: one of nothing_saveable,
// everything_saveable, dots_saveable, dots_with_no_batch_dims_saveable,
// save_only_these_names:NAME[,NAME...] and save_any_names_but_these:NAME[,NAME...], or several of
// them joined by "+" (SaveFromBoth). JAX's aliases checkpoint_dots and
// checkpoint_dots_with_no_batch_dims are accepted. Errors name the part that is wrong and list the
// accepted policies.
func ParsePolicy(s string) (Policy, error) {
	if strings.TrimSpace(s) == "" {
		return Policy{}, fmt.Errorf("empty remat policy; the policies are %s", strings.Join(policyNames, ", "))
	}
	var policy Policy
	for i, part := range strings.Split(s, "+") {
		p, err := parseOnePolicy(strings.TrimSpace(part))
		if err != nil {
			return Policy{}, fmt.Errorf("remat policy %q: %w", s, err)
		}
		if i == 0 {
			policy = p
		} else {
			policy = SaveFromBoth(policy, p)
		}
	}
	return policy, nil
}

func parseOnePolicy(part string) (Policy, error) {
	kind, list, hasList := strings.Cut(part, ":")
	switch kind {
	case "nothing_saveable", "everything_saveable", "dots_saveable", "checkpoint_dots",
		"dots_with_no_batch_dims_saveable", "checkpoint_dots_with_no_batch_dims":
		if hasList {
			return Policy{}, fmt.Errorf("%q takes no names; only save_only_these_names and save_any_names_but_these do", part)
		}
	}
	switch kind {
	case "nothing_saveable":
		return NothingSaveable, nil
	case "everything_saveable":
		return EverythingSaveable, nil
	case "dots_saveable", "checkpoint_dots":
		return DotsSaveable, nil
	case "dots_with_no_batch_dims_saveable", "checkpoint_dots_with_no_batch_dims":
		return DotsWithNoBatchDimsSaveable, nil
	case "save_only_these_names", "save_any_names_but_these":
		var names []string
		for _, n := range strings.Split(list, ",") {
			if n = strings.TrimSpace(n); n != "" {
				names = append(names, n)
			}
		}
		if len(names) == 0 {
			return Policy{}, fmt.Errorf("%q needs names after a colon, e.g. %s:attn_out,mlp_out", part, kind)
		}
		if kind == "save_only_these_names" {
			return SaveOnlyTheseNames(names...), nil
		}
		return SaveAnyNamesButThese(names...), nil
	}
	known := slices.Clone(policyNames)
	return Policy{}, fmt.Errorf("unknown policy %q; the policies are %s (join several with +)", part, strings.Join(known, ", "))
}
