package analysis_test

import (
	"maps"
	"testing"

	"github.com/onegpu/onegpu/analysis"
)

// hloSample is a module in the text format of XLA's CPU plugin (lammps-jax-pjrt-cpu 0.11.2), cut
// down from a dump of onegpu's train step.
const hloSample = `HloModule train_step, is_scheduled=true, entry_computation_layout={(bf16[4,8]{1,0}, f32[8,2]{1,0})->(f32[4,2]{1,0}, (u64[3]{0}, u32[2]{0}))}

%fused_computation.1 (param_0.6: bf16[4,8], param_1.6: f32[8,2]) -> f32[4,2] {
  %param_0.6 = bf16[4,8]{1,0} parameter(0)
  %param_1.6 = f32[8,2]{1,0} parameter(1)
  %convert.7 = bf16[8,2]{1,0} convert(%param_1.6), metadata={source_file="-" source_line=11}
  %dot.416 = bf16[4,2]{1,0} dot(%param_0.6, %convert.7), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %convert.8 = f32[4,2]{1,0} convert(%dot.416)
}

ENTRY %main.261 (Arg_0.521: bf16[4,8], Arg_1.521: f32[8,2]) -> (f32[4,2], (u64[3], u32[2])) {
  %Arg_0.521 = bf16[4,8]{1,0} parameter(0)
  %Arg_1.521 = f32[8,2]{1,0} parameter(1)
  %constant.1 = f64[] constant(0.5)
  %multiply.2 = f64[] multiply(%constant.1, %constant.1)
  %fusion = f32[4,2]{1,0} fusion(%Arg_0.521, %Arg_1.521), kind=kOutput, calls=%fused_computation.1
  %pair = (u64[3]{0}, u32[2]{0}) custom-call(%Arg_1.521), custom_call_target="x"
  ROOT %tuple.0 = (f32[4,2]{1,0}, (u64[3]{0}, u32[2]{0})) tuple(%fusion, %pair)
}
`

// TestParseHLOCensus counts a known module by hand.
func TestParseHLOCensus(t *testing.T) {
	c := analysis.ParseHLOCensus(hloSample)
	want := map[string]int{
		"parameter bf16": 2, "parameter f32": 2, "convert f32->bf16": 1, "dot bf16,bf16->bf16": 1, "convert bf16->f32": 1,
		"constant f64": 1, "multiply f64": 1, "fusion f32": 1, "custom-call tuple": 1, "tuple tuple": 1,
	}
	if !maps.Equal(c.Ops, want) || c.Instructions != 12 {
		t.Errorf("census %d instructions %v,\nwant 12 %v", c.Instructions, c.Ops, want)
	}
	rows := analysis.CensusRows(c)
	wantRows := []string{"constant f64", "convert bf16->f32", "convert f32->bf16", "custom-call tuple", "dot bf16,bf16->bf16", "fusion f32", "multiply f64"}
	if len(rows) != len(wantRows) {
		t.Fatalf("rows %v, want %v", rows, wantRows)
	}
	for i := range rows {
		if rows[i] != wantRows[i] {
			t.Errorf("rows %v, want %v", rows, wantRows)
			break
		}
	}
}
