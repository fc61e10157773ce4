package audit

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/graph"
)

// FindingGroup is the findings of one kind with one message: one problem repeated in every
// block, micro-batch and recomputation.
type FindingGroup struct {
	Kind     FindingKind
	Message  string
	Findings []Finding
	// Where are the scopes of the findings with the numbers that tell instances apart written
	// "*" ("/block_*/mlp"), each once, in the order found; findings without a scope add none.
	Where []string
	// Scopes are the distinct scopes themselves ("/block_0/mlp", "/block_1/mlp", ...).
	Scopes []string
}

var scopeNumbers = regexp.MustCompile(`\d+`)

// GroupFindings groups findings of one kind with the same message (see FindingGroup), in the
// order of each group's first finding.
func GroupFindings(findings []Finding) []FindingGroup {
	var groups []FindingGroup
	index := map[string]int{}
	for _, f := range findings {
		key := string(f.Kind) + "\x00" + f.Message
		i, ok := index[key]
		if !ok {
			i = len(groups)
			index[key] = i
			groups = append(groups, FindingGroup{Kind: f.Kind, Message: f.Message})
		}
		g := &groups[i]
		g.Findings = append(g.Findings, f)
		if f.Scope == "" || slices.Contains(g.Scopes, f.Scope) {
			continue
		}
		g.Scopes = append(g.Scopes, f.Scope)
		if where := scopeNumbers.ReplaceAllString(f.Scope, "*"); !slices.Contains(g.Where, where) {
			g.Where = append(g.Where, where)
		}
	}
	return groups
}

// String is one line: "float32 detour ×32, in /block_*/mlp (4 scopes): a 16-bit value ...".
func (g FindingGroup) String() string {
	var b strings.Builder
	b.WriteString(string(g.Kind))
	if len(g.Findings) > 1 {
		fmt.Fprintf(&b, " ×%d", len(g.Findings))
	}
	switch {
	case len(g.Scopes) == 1:
		fmt.Fprintf(&b, ", in %s", g.Scopes[0])
	case len(g.Scopes) > 1:
		fmt.Fprintf(&b, ", in %s (%d scopes)", strings.Join(g.Where, ", "), len(g.Scopes))
	}
	return b.String() + ": " + g.Message
}

// nearestScope returns the scope shared by the variables nearest to n (the fewest inputs back
// from it), such as "/block_3/mlp", or "" when none is within reach. It names where a finding is:
// GoMLX nodes carry no scope, but the variables a layer reads do.
func nearestScope(n *graph.Node) string {
	const reach = 2000 // nodes visited at most
	seen := map[graph.NodeId]bool{n.Id(): true}
	level := []*graph.Node{n}
	for visited := 0; len(level) > 0 && visited < reach; {
		var scopes [][]string
		var next []*graph.Node
		for _, m := range level {
			visited++
			if m.Type() == graph.NodeTypeParameter {
				if name, ok := strings.CutPrefix(m.GetParameterName(), "var:"); ok {
					parts := strings.Split(name, "/")
					scopes = append(scopes, parts[:len(parts)-1]) // the variable's own name is no place
				}
				continue
			}
			for _, in := range m.Inputs() {
				if !seen[in.Id()] {
					seen[in.Id()] = true
					next = append(next, in)
				}
			}
		}
		if len(scopes) > 0 {
			return strings.Join(commonPrefix(scopes), "/")
		}
		level = next
	}
	return ""
}

// commonPrefix returns the path components all of paths start with.
func commonPrefix(paths [][]string) []string {
	common := paths[0]
	for _, p := range paths[1:] {
		k := 0
		for k < len(common) && k < len(p) && common[k] == p[k] {
			k++
		}
		common = common[:k]
	}
	return common
}
