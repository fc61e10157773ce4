package mixed

import (
	"fmt"
	"strings"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/onegpu/onegpu/platform"
)

// Policy says in which dtype a model keeps its parameters, computes, and returns its outputs.
// It is a comparable value (like jmp.Policy): two policies are equal when their three dtypes are.
//
// The zero Policy is not valid (its dtypes are dtypes.InvalidDType); build one with ParsePolicy or
// a literal such as Policy{Param: dtypes.Float32, Compute: dtypes.BFloat16, Output: dtypes.Float32}.
type Policy struct {
	// Param is the dtype parameters are stored (and updated by the optimizer) in. Usually float32.
	Param dtypes.DType
	// Compute is the dtype of the model's arithmetic: activations, matmuls, elementwise ops.
	Compute dtypes.DType
	// Output is the dtype of the model's outputs (logits, predictions), usually float32 so that
	// the loss is computed at full precision.
	Output dtypes.DType
}

// dtypeNames lists, for each policy dtype, its accepted names; the first is the canonical one
// used by Policy.String. The grammar follows jmp (full = float32) and adds half = float16
// (jmp makes "half" depend on the platform; onegpu never guesses).
var dtypeNames = []struct {
	dtype dtypes.DType
	names []string
}{
	{dtypes.Float32, []string{"float32", "f32", "full"}},
	{dtypes.BFloat16, []string{"bfloat16", "bf16"}},
	{dtypes.Float16, []string{"float16", "f16", "half"}},
	{dtypes.Float64, []string{"float64", "f64"}},
}

// acceptedDTypes is the list of accepted dtype names, for error messages.
const acceptedDTypes = "float32 (f32, full), bfloat16 (bf16), float16 (f16, half) or float64 (f64)"

// acceptedKeys is the list of accepted keys, for error messages.
const acceptedKeys = "params (p), compute (c) or output (o)"

// ParseDType parses one dtype name of the policy grammar: float32/f32/full, bfloat16/bf16,
// float16/f16/half or float64/f64 (case-insensitive).
func ParseDType(name string) (dtypes.DType, error) {
	s := strings.ToLower(strings.TrimSpace(name))
	for _, d := range dtypeNames {
		for _, n := range d.names {
			if s == n {
				return d.dtype, nil
			}
		}
	}
	return dtypes.InvalidDType, fmt.Errorf("unknown dtype %q: use %s", name, acceptedDTypes)
}

// dtypeName returns the canonical name of a policy dtype, or GoMLX's name for any other.
func dtypeName(dtype dtypes.DType) string {
	for _, d := range dtypeNames {
		if d.dtype == dtype {
			return d.names[0]
		}
	}
	return dtype.String()
}

// ParsePolicy parses a policy written in jmp's grammar:
//
//   - a bare dtype name sets all three dtypes: "bf16" is params=bfloat16,compute=bfloat16,output=bfloat16;
//   - comma-separated KEY=DTYPE pairs with keys params (p), compute (c) and output (o), e.g.
//     "params=float32,compute=bfloat16,output=float32" or "p=f32,c=bf16".
//
// Dtype names are float32/f32/full, bfloat16/bf16, float16/f16/half and float64/f64; names and keys
// are case-insensitive and spaces around them are ignored. Keys left out take defaults: params
// float32, compute follows params, output follows compute (so "c=bf16" is
// params=float32,compute=bfloat16,output=bfloat16).
//
// An invalid string is an error that quotes the bad part and lists what is accepted.
func ParsePolicy(s string) (Policy, error) {
	if strings.TrimSpace(s) == "" {
		return Policy{}, fmt.Errorf("empty precision policy: use a dtype name (e.g. \"bf16\") or "+
			"KEY=DTYPE pairs (e.g. \"params=float32,compute=bfloat16,output=float32\"); keys are %s", acceptedKeys)
	}
	if !strings.Contains(s, "=") {
		dtype, err := ParseDType(s)
		if err != nil {
			return Policy{}, fmt.Errorf("precision policy %q: %w", s, err)
		}
		return Policy{dtype, dtype, dtype}, nil
	}
	param, compute, output := dtypes.Float32, dtypes.InvalidDType, dtypes.InvalidDType
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		key, value, ok := strings.Cut(part, "=")
		if !ok {
			return Policy{}, fmt.Errorf("precision policy %q: part %q is not KEY=DTYPE; keys are %s and dtypes are %s",
				s, part, acceptedKeys, acceptedDTypes)
		}
		dtype, err := ParseDType(value)
		if err != nil {
			return Policy{}, fmt.Errorf("precision policy %q: in %q: %w", s, part, err)
		}
		var canonical string
		switch strings.ToLower(strings.TrimSpace(key)) {
		case "params", "p":
			canonical, param = "params", dtype
		case "compute", "c":
			canonical, compute = "compute", dtype
		case "output", "o":
			canonical, output = "output", dtype
		default:
			return Policy{}, fmt.Errorf("precision policy %q: unknown key %q in %q: use %s", s, key, part, acceptedKeys)
		}
		if seen[canonical] {
			return Policy{}, fmt.Errorf("precision policy %q: %s is given twice (in %q)", s, canonical, part)
		}
		seen[canonical] = true
	}
	if compute == dtypes.InvalidDType {
		compute = param
	}
	if output == dtypes.InvalidDType {
		output = compute
	}
	return Policy{param, compute, output}, nil
}

// String returns the policy in ParsePolicy's long form, e.g.
// "params=float32,compute=bfloat16,output=float32": ParsePolicy(p.String()) == p for every valid p.
func (p Policy) String() string {
	return fmt.Sprintf("params=%s,compute=%s,output=%s", dtypeName(p.Param), dtypeName(p.Compute), dtypeName(p.Output))
}

// MarshalText writes p as String does, so that a policy stored in a context (SetPolicy) survives
// GoMLX's checkpoints, which save context parameters as JSON.
func (p Policy) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText reads a policy in ParsePolicy's grammar.
func (p *Policy) UnmarshalText(text []byte) error {
	parsed, err := ParsePolicy(string(text))
	if err != nil {
		return err
	}
	*p = parsed
	return nil
}

// computes reports whether backend can compute dtype. GoMLX v0.26.0's XLA backend leaves float16
// out of its Capabilities().DTypes although XLA computes it (verified with the CPU PJRT plugin), so
// float16 is accepted on any backend named "xla".
func computes(backend backends.Backend, dtype dtypes.DType) bool {
	return backend.Capabilities().DTypes[dtype] || (dtype == dtypes.Float16 && backend.Name() == platform.XLABackendName)
}

// Validate reports whether each of the policy's dtypes is one of float32, bfloat16, float16 and
// float64, and, when backend is not nil, whether the backend can compute it.
//
// Use it before building a graph: GoMLX v0.26.0's embedded backend has no float16 at all, and a
// clear error here beats a failure in the middle of graph building. onegpu's platform.NewBackend also
// refuses float16 while a graph is built, so an unchecked policy still fails before execution.
func (p Policy) Validate(backend backends.Backend) error {
	for _, f := range []struct {
		role  string
		dtype dtypes.DType
	}{{"params", p.Param}, {"compute", p.Compute}, {"output", p.Output}} {
		known := false
		for _, d := range dtypeNames {
			known = known || d.dtype == f.dtype
		}
		if !known {
			return fmt.Errorf("precision policy %s: %s dtype %s is not a policy dtype: use %s",
				p, f.role, f.dtype, acceptedDTypes)
		}
		if backend == nil || computes(backend, f.dtype) {
			continue
		}
		fix := "choose another dtype"
		if f.dtype == dtypes.Float16 {
			fix = "use bfloat16 instead (the same memory saving, e.g. \"params=float32,compute=bfloat16,output=float32\"), " +
				"or run on XLA with a PJRT plugin (--backend xla:/abs/path/plugin.so), which computes float16"
		}
		return fmt.Errorf("precision policy %s: the %s backend cannot compute %s (%s dtype): %s",
			p, backend.Name(), dtypeName(f.dtype), f.role, fix)
	}
	return nil
}
