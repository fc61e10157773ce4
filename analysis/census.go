package analysis

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// HLOCensus counts the instructions of an optimized HLO module (XLA's text format, as
// compiled.as_text() and --xla_dump_to write it) by opcode and element type, in every computation
// (fused ones included). It tells where two programs for the same model differ: converts, dots
// and their operand types, reductions, fusions, copies, transposes, loops, float64 work.
type HLOCensus struct {
	// Instructions counts every instruction.
	Instructions int `json:"instructions"`
	// Ops counts instructions by "opcode type": the result's element type ("tuple" for tuples);
	// converts as "convert from->to", dots and convolutions as "dot lhs,rhs->result".
	Ops map[string]int `json:"ops"`
}

// ParseHLOCensus counts the instructions of HLO text.
func ParseHLOCensus(text string) HLOCensus {
	c := HLOCensus{Ops: map[string]int{}}
	types := map[string]string{} // instruction or parameter name -> element type
	type pending struct {
		key, opcode, resultType string
		operands                []string
	}
	var insts []pending
	for _, line := range strings.Split(text, "\n") {
		name, resultType, opcode, operands, ok := parseHLOInstruction(line)
		if !ok {
			continue
		}
		types[name] = resultType
		insts = append(insts, pending{opcode: opcode, resultType: resultType, operands: operands})
	}
	// Operand types are looked up once all names are known (computations may come in any order).
	for _, in := range insts {
		key := in.opcode + " " + in.resultType
		switch in.opcode {
		case "convert":
			if len(in.operands) == 1 {
				key = fmt.Sprintf("convert %s->%s", typeOr(types, in.operands[0]), in.resultType)
			}
		case "dot", "convolution":
			if len(in.operands) == 2 {
				key = fmt.Sprintf("%s %s,%s->%s", in.opcode, typeOr(types, in.operands[0]), typeOr(types, in.operands[1]), in.resultType)
			}
		}
		c.Ops[key]++
		c.Instructions++
	}
	return c
}

func typeOr(types map[string]string, name string) string {
	if t, ok := types[name]; ok {
		return t
	}
	return "?"
}

// parseHLOInstruction reads "  [ROOT] %name = TYPE opcode(%a, %b), attrs" into its parts, with
// TYPE reduced to its element type. Parameters of a computation's signature are not instructions.
func parseHLOInstruction(line string) (name, elemType, opcode string, operands []string, ok bool) {
	s := strings.TrimSpace(line)
	s = strings.TrimPrefix(s, "ROOT ")
	eq := strings.Index(s, " = ")
	if eq <= 0 || strings.ContainsAny(s[:eq], " (") {
		return
	}
	name = strings.TrimPrefix(s[:eq], "%")
	rest := s[eq+3:]
	var typ string
	if strings.HasPrefix(rest, "(") {
		end := matchingParen(rest)
		if end < 0 {
			return
		}
		typ, rest = "tuple", rest[end+1:]
	} else {
		sp := strings.IndexByte(rest, ' ')
		if sp < 0 {
			return
		}
		typ, rest = rest[:sp], rest[sp:]
		if i := strings.IndexByte(typ, '['); i >= 0 {
			typ = typ[:i]
		}
	}
	rest = strings.TrimSpace(rest)
	open := strings.IndexByte(rest, '(')
	if open <= 0 {
		return
	}
	opcode = rest[:open]
	if strings.ContainsAny(opcode, " =,") {
		return
	}
	args := rest[open:]
	if end := matchingParen(args); end > 0 {
		args = args[1:end]
	}
	for _, a := range splitTopLevel(args) {
		a = strings.TrimSpace(a)
		if i := strings.LastIndexByte(a, ' '); i >= 0 { // "f32[2]{0} %x" in formats that print operand shapes
			a = a[i+1:]
		}
		if strings.HasPrefix(a, "%") {
			operands = append(operands, a[1:])
		} else if a != "" && opcode != "constant" && opcode != "parameter" {
			operands = append(operands, a)
		}
	}
	return name, typ, opcode, operands, true
}

// matchingParen returns the index of the parenthesis closing s[0], or -1.
func matchingParen(s string) int {
	depth := 0
	for i, r := range s {
		switch r {
		case '(', '[', '{':
			depth++
		case ')', ']', '}':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

// splitTopLevel splits s at the commas outside brackets.
func splitTopLevel(s string) []string {
	var parts []string
	depth, start := 0, 0
	for i, r := range s {
		switch r {
		case '(', '[', '{':
			depth++
		case ')', ']', '}':
			depth--
		case ',':
			if depth == 0 {
				parts = append(parts, s[start:i])
				start = i + 1
			}
		}
	}
	return append(parts, s[start:])
}

// ReadHLOCensus counts the instructions of the HLO text file at path.
func ReadHLOCensus(path string) (HLOCensus, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return HLOCensus{}, err
	}
	return ParseHLOCensus(string(b)), nil
}

// OptimizedHLOFiles lists the optimized HLO modules XLA dumped under dir (--xla_dump_to), oldest
// module first: the files named module_NNNN.NAME.*after_optimizations.txt.
func OptimizedHLOFiles(dir string) ([]string, error) {
	matches, err := filepath.Glob(filepath.Join(dir, "module_*after_optimizations.txt"))
	if err != nil {
		return nil, err
	}
	sort.Strings(matches) // module numbers are zero-padded
	return matches, nil
}

// CensusKinds are the opcodes a side-by-side census shows; other opcodes are shown only when
// their element type is float64.
var CensusKinds = []string{"convert", "dot", "convolution", "reduce", "reduce-window", "fusion", "copy", "transpose",
	"while", "custom-call", "all-reduce", "divide", "exponential"}

// CensusRows returns the keys a side-by-side view of censuses shows, sorted: those of the
// CensusKinds opcodes and every float64 instruction, from any census.
func CensusRows(censuses ...HLOCensus) []string {
	keys := map[string]bool{}
	for _, c := range censuses {
		for k := range c.Ops {
			opcode, typ, _ := strings.Cut(k, " ")
			if slices.Contains(CensusKinds, opcode) || strings.Contains(typ, "f64") {
				keys[k] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(keys))
}
