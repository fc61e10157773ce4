package mixed_test

import (
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/onegpu/onegpu/mixed"
)

const (
	f32  = dtypes.Float32
	bf16 = dtypes.BFloat16
	f16  = dtypes.Float16
	f64  = dtypes.Float64
)

func TestParsePolicy(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want mixed.Policy
	}{
		{"params=float32,compute=bfloat16,output=float32", mixed.Policy{f32, bf16, f32}},
		{"p=f32,c=bf16,o=f32", mixed.Policy{f32, bf16, f32}},
		{"c=bf16", mixed.Policy{f32, bf16, bf16}},       // params default float32, output follows compute
		{"compute=half", mixed.Policy{f32, f16, f16}},   // half is float16
		{"p=f16", mixed.Policy{f16, f16, f16}},          // compute follows params
		{"p=f16,c=bf16", mixed.Policy{f16, bf16, bf16}}, // jmp's example
		{"o=f64", mixed.Policy{f32, f32, f64}},          // output alone
		{"output=full,params=bf16", mixed.Policy{bf16, bf16, f32}},
		{"bf16", mixed.Policy{bf16, bf16, bf16}}, // a bare name sets all three
		{"full", mixed.Policy{f32, f32, f32}},
		{"f64", mixed.Policy{f64, f64, f64}},
		{"float16", mixed.Policy{f16, f16, f16}},
		{" P = F32 , C = BFloat16 ", mixed.Policy{f32, bf16, bf16}}, // spaces and case are forgiven
	} {
		got, err := mixed.ParsePolicy(tc.in)
		if err != nil {
			t.Errorf("ParsePolicy(%q): %v", tc.in, err)
			continue
		}
		if got != tc.want {
			t.Errorf("ParsePolicy(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

func TestParsePolicyErrors(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string // substrings of the error
	}{
		{"", []string{"empty", "params (p), compute (c) or output (o)"}},
		{"bf8", []string{`"bf8"`, "float32 (f32, full), bfloat16 (bf16), float16 (f16, half) or float64 (f64)"}},
		{"params=float32,compute=int8", []string{`"int8"`, `"compute=int8"`, "bfloat16 (bf16)"}},
		{"param=f32", []string{`unknown key "param"`, "params (p), compute (c) or output (o)"}},
		{"p=f32,bf16", []string{`part "bf16"`, "KEY=DTYPE"}},
		{"c=bf16,compute=f32", []string{"compute is given twice", `"compute=f32"`}},
		{"p=f32,,c=bf16", []string{`part ""`}},
	} {
		_, err := mixed.ParsePolicy(tc.in)
		if err == nil {
			t.Errorf("ParsePolicy(%q): no error", tc.in)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("ParsePolicy(%q) error %q does not contain %q", tc.in, err, w)
			}
		}
	}
}

func TestPolicyStringRoundTrip(t *testing.T) {
	all := []dtypes.DType{f32, bf16, f16, f64}
	for _, p := range all {
		for _, c := range all {
			for _, o := range all {
				policy := mixed.Policy{Param: p, Compute: c, Output: o}
				got, err := mixed.ParsePolicy(policy.String())
				if err != nil || got != policy {
					t.Errorf("ParsePolicy(%q) = %v, %v; want %v", policy.String(), got, err, policy)
				}
			}
		}
	}
	if s := (mixed.Policy{f32, bf16, f32}).String(); s != "params=float32,compute=bfloat16,output=float32" {
		t.Errorf("String() = %q", s)
	}
}

func TestPolicyValidate(t *testing.T) {
	for _, tc := range []struct {
		policy mixed.Policy
		want   []string // substrings of the error; nil means valid
	}{
		{mixed.Policy{f32, bf16, f32}, nil},
		{mixed.Policy{f32, f32, f32}, nil},
		{mixed.Policy{f32, f16, f32}, []string{"cannot compute float16", "compute dtype", "bfloat16", "xla:"}},
		{mixed.Policy{f16, f16, f16}, []string{"params dtype"}},
		{mixed.Policy{f32, dtypes.Int32, f32}, []string{"not a policy dtype", "bfloat16 (bf16)"}},
		{mixed.Policy{}, []string{"not a policy dtype"}},
	} {
		err := tc.policy.Validate(embedded())
		if tc.want == nil {
			if err != nil {
				t.Errorf("%s: %v", tc.policy, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: no error on the embedded backend", tc.policy)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not contain %q", tc.policy, err, w)
			}
		}
	}
	if err := (mixed.Policy{f16, f16, f16}).Validate(nil); err != nil {
		t.Errorf("without a backend float16 is a valid policy dtype: %v", err)
	}
}
