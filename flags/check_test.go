package flags

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// verdict is the outcome of checking one setting: accepted, accepted with a warning, or rejected.
type verdict int

const (
	accepted verdict = iota
	warned
	rejected
)

func (v verdict) String() string { return [...]string{"accepted", "warned", "rejected"}[v] }

// checkOne checks text on b and returns the verdict with the problem that decided it.
func checkOne(t *testing.T, text string, b Build) (verdict, Problem) {
	t.Helper()
	s, _ := Parse(text)
	warnings, err := s.Check(b)
	var ps Problems
	switch {
	case errors.As(err, &ps):
		return rejected, ps[0]
	case err != nil:
		t.Fatalf("Check(%q): %v", text, err)
	case len(warnings) > 0:
		return warned, warnings[0]
	}
	return accepted, Problem{}
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name  string
		text  string
		build Build
		want  verdict
		// What the deciding problem must say: its message and fix contain these.
		inMessage, inFix string
	}{
		{"known bool", "--xla_gpu_deterministic_ops=true", CUDA011, accepted, "", ""},
		{"bare bool means true", "--xla_gpu_deterministic_ops", CUDA011, accepted, "", ""},
		{"bool 1 and 0", "--xla_gpu_deterministic_ops=1 --xla_gpu_deterministic_ops=0", CUDA011, accepted, "", ""},
		{"bool in any case", "--xla_gpu_deterministic_ops=TRUE", CUDA011, accepted, "", ""},
		{"bad bool", "--xla_gpu_deterministic_ops=yes", CUDA011, rejected, `"yes" is not a bool`, "=true|false"},
		{"int", "--xla_gpu_autotune_level=2", CUDA011, accepted, "", ""},
		{"signed int", "--xla_gpu_autotune_level=-1 --xla_gpu_autotune_level=+3", CUDA011, accepted, "", ""},
		{"int needs '='", "--xla_gpu_autotune_level", CUDA011, rejected, "takes a value (int32) after '='", "=<int32>"},
		{"string needs '='", "--xla_dump_to", CUDA011, rejected, "takes a value (string)", ""},
		{"bad int", "--xla_gpu_autotune_level=1.5", CUDA011, rejected, "is not an int32", "=<int32>"},
		{"hex int", "--xla_gpu_autotune_level=0x2", CUDA011, rejected, "is not an int32", ""},
		{"empty int", "--xla_gpu_autotune_level=", CUDA011, rejected, "is not an int32", ""},
		{"int32 overflow", "--xla_gpu_memory_limit_slop_factor=2147483648", CUDA011, rejected, "out of the int32 range", ""},
		{"int32 minimum", "--xla_gpu_memory_limit_slop_factor=-2147483648", CUDA011, accepted, "", ""},
		{"int64 fits", "--xla_gpu_redzone_padding_bytes=9223372036854775807", CUDA011, accepted, "", ""},
		{"int64 overflow", "--xla_gpu_redzone_padding_bytes=9223372036854775808", CUDA011, rejected, "out of the int64 range", ""},
		{"float", "--xla_gpu_autotune_gemm_rtol=0.05", CUDA011, accepted, "", ""},
		{"float forms", "--xla_gpu_autotune_gemm_rtol=1e-3 --xla_gpu_autotune_gemm_rtol=.5 --xla_gpu_autotune_gemm_rtol=inf", CUDA011, accepted, "", ""},
		{"bad float", "--xla_gpu_autotune_gemm_rtol=0.1f", CUDA011, rejected, "is not a float", ""},
		{"float overflow", "--xla_gpu_autotune_gemm_rtol=1e39", CUDA011, rejected, "overflows float32", ""},
		{"empty string", "--xla_dump_to=", CUDA011, accepted, "", ""},
		{"empty list disables command buffers", "--xla_gpu_enable_command_buffer=", CUDA011, accepted, "", ""},
		{"known enum value", "--xla_gpu_shape_checks=IGNORE", CUDA011, accepted, "", ""},
		{"unknown enum value", "--xla_gpu_shape_checks=SOMETIMES", CUDA011, rejected, `"SOMETIMES" is not a value the build accepts`, "IGNORE|RUNTIME|COMPILE_TIME"},
		{"enum values are case-sensitive", "--xla_gpu_shape_checks=ignore", CPU0115, rejected, "not a value the build accepts", "IGNORE|RUNTIME|COMPILE_TIME"},
		{"empty enum", "--xla_gpu_shape_checks=", CUDA011, rejected, "no empty value", ""},
		{"cpu-0.115's detection modes", "--xla_gpu_detect_nan=warning --xla_gpu_detect_inf=fail --xla_detect_unstable_reductions=none", CPU0115, accepted, "", ""},
		{"no proto name for a detection mode on cpu-0.115", "--xla_gpu_detect_nan=DETECTION_MODE_WARNING", CPU0115, rejected, `"DETECTION_MODE_WARNING" is not a value`, "none|warning|fail|dump"},
		{"detection modes are case-sensitive on cpu-0.115", "--xla_gpu_detect_nan=WARNING", CPU0115, rejected, "Flag parsing failed", ""},
		{"unknown values on cuda-0.11", "--xla_gpu_detect_nan=warning", CUDA011, rejected, "onegpu does not know which values cuda-0.11 accepts for --xla_gpu_detect_nan",
			"leave --xla_gpu_detect_nan unset on cuda-0.11, or use a build whose values onegpu knows: cpu-0.115 (none|warning|fail|dump)"},
		{"unknown values include the proto names", "--xla_gpu_detect_nan=DETECTION_MODE_NONE", Head, rejected, "does not know which values head accepts", "cpu-0.115"},
		{"pipelining modes in any case on cpu-0.115", "--xla_gpu_pipeline_all_reduce=on --xla_gpu_pipeline_all_gather=OFF --xla_gpu_pipeline_reduce_scatter=Default", CPU0115, accepted, "", ""},
		{"no proto name for a pipelining mode", "--xla_gpu_pipeline_all_reduce=COLLECTIVE_PIPELINING_MODE_ON", CPU0115, rejected, "not a value the build accepts", "default|off|on|explicit"},
		{"collective memory modes", "--xla_gpu_all_gather_mode=symmetric --xla_gpu_ragged_all_to_all_mode=PEER", CPU0115, accepted, "", ""},
		{"no proto name for a collective memory mode", "--xla_gpu_collective_permute_mode=COLLECTIVES_PRIVATE_MEMORY", CPU0115, rejected, "not a value", "private|symmetric|peer"},
		{"an enum without values is unknown", "--xla_cpu_scheduler_type=CPU_SCHEDULER_TYPE_DEFAULT", CUDA011, rejected, "does not know which values", "cpu-0.115"},
		{"free text where the setter takes any", "--xla_disable_hlo_passes=x,y --xla_enable_hlo_passes_only=", CUDA011, accepted, "", ""},
		{"XLA's own backend options", "--xla_backend_extra_options=xla_cpu_a=1,xla_b", CPU0115, accepted, "", ""},
		{"a backend option for LLVM", "--xla_backend_extra_options=bogus", CPU0115, rejected, `item "bogus": XLA hands keys that do not start with xla_ to LLVM`, "xla_KEY[=VALUE]"},
		{"an LLVM option after XLA's", "--xla_backend_extra_options=xla_a=b,-unroll-threshold=10", CUDA011, rejected, `item "-unroll-threshold=10"`, ""},
		{"an empty backend option", "--xla_backend_extra_options=", Head, rejected, "an item without a key", ""},
		{"an empty backend option item", "--xla_backend_extra_options=xla_a,,xla_b", CPU083, rejected, "an item without a key", ""},
		{"no text for an unknown list", "--xla_gpu_ptx_compiler_extra_flags=-v", CUDA011, rejected, "does not know which values", "cpu-0.115 (any text)"},
		{"a list of names", "--xla_gpu_disable_async_collectives=allreduce,ALLGATHER", CPU0115, accepted, "", ""},
		{"an empty list where the setter refuses it", "--xla_gpu_disable_async_collectives=", CPU0115, rejected, "no empty list", ""},
		{"an item the build does not know", "--xla_gpu_disable_async_collectives=ALLREDUCE,SOME", CPU0115, rejected, `"SOME" is not an item`, "ALLREDUCE"},
		{"an empty item", "--xla_gpu_enable_command_buffer=FUSION,", CUDA011, rejected, "empty item", ""},
		{"list edits", "--xla_gpu_enable_command_buffer=+CUDNN,-FUSION", CUDA011, accepted, "", ""},
		{"no edits mixed with items", "--xla_gpu_enable_command_buffer=CUDNN,-FUSION", CUDA011, rejected, "mixes +NAME/-NAME items with plain ones", ""},
		{"no edits where the build's setter is not known to take them", "--xla_gpu_enable_command_buffer=+CUBLAS", JAX0425, rejected, "takes no +NAME/-NAME items", ""},
		{"fuel", "--xla_fuel=algsimp=3,dce=-1", JAX0425, accepted, "", ""},
		{"empty fuel", "--xla_fuel=", CPU0115, rejected, "refuses it", "PASS=N"},
		{"fuel without a number", "--xla_fuel=algsimp", CPU0115, rejected, `"algsimp" is not PASS=N`, ""},
		{"fuel with a float", "--xla_fuel=algsimp=1.5", CUDA011, rejected, "is not PASS=N", ""},
		{"thunk id ranges", "--xla_gpu_experimental_thunk_buffer_debug_filter_by_thunk_id_ranges=1,3:5,7:,:9", CPU0115, accepted, "", ""},
		{"a backward range", "--xla_gpu_experimental_thunk_buffer_debug_filter_by_thunk_id_ranges=5:3", CPU0115, rejected, "start is after its end", ""},
		{"no signed range", "--xla_gpu_experimental_thunk_buffer_debug_filter_by_thunk_id_ranges=-1", CPU0115, rejected, "not a range", ""},
		{"a duration", "--xla_gpu_execution_terminate_timeout=1h30m --xla_gpu_execution_terminate_timeout=-inf --xla_gpu_execution_terminate_timeout=.5s", CPU0115, accepted, "", ""},
		{"a duration needs a unit", "--xla_gpu_execution_terminate_timeout=30", CPU0115, rejected, "not a duration", ""},
		{"unknown duration form on cuda-0.11", "--xla_gpu_execution_terminate_timeout=30s", CUDA011, rejected, "does not know which values", ""},
		{"deprecated no-op warns", "--xla_gpu_enable_cudnn_fmha=true", CUDA011, warned, "accepts it and ignores it", "drop it"},
		{"deprecated with a successor", "--xla_gpu_enable_pipelined_all_reduce=true", Head, warned, "deprecated", "--xla_gpu_pipeline_all_reduce"},
		{"removed, with replacement", "--xla_gpu_graph_level=1", CUDA011, rejected, "removed by cpu-0.83 (last defined by jax-0.4.25)", "--xla_gpu_enable_command_buffer"},
		{"removed, no replacement", "--xla_gpu_enable_split_k_autotuning=true", CUDA011, rejected, "removed by cuda-0.11 (last defined by cpu-0.83)", "no replacement"},
		{"too new", "--xla_gpu_pipeline_all_reduce=X", CUDA011, rejected, "too new for cuda-0.11 (first defined by head)", "head or later"},
		{"too new for CPU", "--xla_gpu_pipeline_all_reduce=X", CPU083, rejected, "too new for cpu-0.83 (first defined by cpu-0.115)", "cpu-0.115 or later"},
		{"too new for both plugins", "--xla_gpu_match_tpu_precision=true", CPU0115, rejected, "too new for cpu-0.115 (first defined by head)", ""},
		{"removed before cpu-0.115", "--xla_gpu_fused_attention_use_cudnn_rng=true", CPU0115, rejected, "removed by cpu-0.115 (last defined by cuda-0.11)", ""},
		{"a CPU plugin cannot turn on libnvptxcompiler", "--xla_gpu_enable_libnvptxcompiler=TRUE", CPU0115, rejected, "has no libnvptxcompiler", "=false"},
		{"a bare bool turns it on too", "--xla_gpu_enable_libnvptxcompiler", CPU083, rejected, "has no libnvptxcompiler", ""},
		{"turning libnvptxcompiler off is fine on CPU", "--xla_gpu_enable_libnvptxcompiler=0", CPU0115, accepted, "", ""},
		{"a CUDA plugin may turn on libnvptxcompiler", "--xla_gpu_enable_libnvptxcompiler=true", CUDA011, accepted, "", ""},
		{"only cpu-0.115 has it", "--xla_gpu_blas_max_algorithms=16", CPU0115, accepted, "", ""},
		{"cpu-0.115's flag on head", "--xla_gpu_blas_max_algorithms=16", Head, rejected, "removed by head (last defined by cpu-0.115)", ""},
		{"typo", "--xla_gpu_autotun_level=2", CUDA011, rejected, "not a flag of cuda-0.11", "did you mean --xla_gpu_autotune_level?"},
		{"unknown", "--xla_made_up_entirely=1", CUDA011, rejected, "Unknown flags in XLA_FLAGS", "drop it"},
		{"single dash", "-xla_gpu_autotune_level=2", CUDA011, rejected, "two dashes", "--xla_gpu_autotune_level=2"},
		{"double dash alone", "--", CUDA011, rejected, "every flag after it", "remove the --"},
		{"no name", "--=2", CUDA011, rejected, "without a name", ""},
		{"space before a value", "--xla_gpu_deterministic_ops true", CUDA011, rejected, "blank before its value", "--xla_gpu_deterministic_ops=true"},
		{"same text on the build that has it", "--xla_gpu_graph_level=1", JAX0425, accepted, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, p := checkOne(t, tt.text, tt.build)
			if got != tt.want {
				t.Fatalf("Check(%q) on %s: %v (%v), want %v", tt.text, tt.build, got, p, tt.want)
			}
			if got == accepted {
				return
			}
			if p.Build != tt.build || !strings.Contains(p.Message, tt.inMessage) || !strings.Contains(p.Fix, tt.inFix) {
				t.Errorf("Check(%q) on %s: %+v; want the build, %q in the message and %q in the fix", tt.text, tt.build, p, tt.inMessage, tt.inFix)
			}
		})
	}
}

// TestTutorialFlagsPerBuild pins the verdict for each of the 2024 tutorial's five flags on each
// build, with its own value.
func TestTutorialFlagsPerBuild(t *testing.T) {
	gone := map[Build]verdict{JAX0425: accepted, CPU083: rejected, CUDA011: rejected, CPU0115: rejected, Head: rejected}
	kept := map[Build]verdict{JAX0425: accepted, CPU083: accepted, CUDA011: accepted, CPU0115: accepted, Head: accepted}
	want := map[string]map[Build]verdict{
		"xla_gpu_enable_triton_softmax_fusion":         gone,
		"xla_gpu_triton_gemm_any":                      kept,
		"xla_gpu_enable_async_collectives":             gone,
		"xla_gpu_enable_latency_hiding_scheduler":      kept,
		"xla_gpu_enable_highest_priority_async_stream": kept,
	}
	tutorial := mustParse(t, Tutorial2024).Settings()
	if len(tutorial) != 5 {
		t.Fatalf("Tutorial2024 has %d flags, want 5", len(tutorial))
	}
	for _, st := range tutorial {
		for _, b := range Builds() {
			got, p := checkOne(t, st.String(), b)
			if got != want[st.Name][b] {
				t.Errorf("%s on %s: %v (%v), want %v", st, b, got, p, want[st.Name][b])
			}
		}
	}
}

func TestCheckUnknownBuild(t *testing.T) {
	if _, err := (Set{}).Check("cuda-9"); err == nil || !strings.Contains(err.Error(), "cuda-0.11") {
		t.Errorf("Check on an unknown build: %v, want an error listing the builds", err)
	}
}

func TestProblemsError(t *testing.T) {
	ps := Problems{
		{Flag: "xla_a", Build: CUDA011, Message: "bad", Fix: "drop it"},
		{Flag: "xla_b", Message: "worse"},
	}
	want := "xla_a (cuda-0.11): bad; fix: drop it\nxla_b: worse"
	if ps.Error() != want {
		t.Errorf("Problems.Error() = %q, want %q", ps.Error(), want)
	}
}

func TestEditDistance(t *testing.T) {
	tests := []struct {
		a, b  string
		limit int
		want  int
	}{
		{"kitten", "sitting", 10, 3},
		{"", "abc", 10, 3},
		{"same", "same", 10, 0},
		{"abcdef", "uvwxyz", 3, 3},
		{"a", "abcdefgh", 3, 3},
	}
	for _, tt := range tests {
		if got := editDistance(tt.a, tt.b, tt.limit); got != tt.want {
			t.Errorf("editDistance(%q, %q, %d) = %d, want %d", tt.a, tt.b, tt.limit, got, tt.want)
		}
	}
}

// TestCheckNumericRanges: numeric flags are judged against the values XLA handles
// (flags/tables/ranges.tsv), on every build that defines them: --xla_cpu_parallel_codegen_split_count=-1
// passed Check and XLA crashed the process when it compiled, and 2147483647 hung it; the message
// names the range and the fix writes it.
func TestCheckNumericRanges(t *testing.T) {
	for _, c := range []struct {
		flag     string
		builds   []Build
		refused  []string
		accepted []string
		want     string
	}{
		{"xla_cpu_parallel_codegen_split_count", []Build{CPU083, CUDA011, CPU0115, Head},
			[]string{"-2147483648", "-1", "0", "65537", "2147483647", "' +65537'"}, []string{"1", "32", "65536", "+7", "' 007'"},
			"is outside 1..65536, the values XLA handles for --xla_cpu_parallel_codegen_split_count: below 1 XLA's CPU compiler fails every compile"},
		{"xla_gpu_experimental_max_unroll_factor", []Build{CUDA011, CPU0115, Head},
			[]string{"-2147483648", "-1", "0"}, []string{"1", "32", "2147483647"},
			`is outside 1..2147483647, the values XLA handles for --xla_gpu_experimental_max_unroll_factor: XLA's setter refuses it and aborts the process ("Flag parsing failed")`},
	} {
		for _, b := range c.builds {
			f, ok := b.Lookup(c.flag)
			if !ok || !f.Ranged {
				t.Errorf("%s: --%s has no range", b, c.flag)
				continue
			}
			if !strings.Contains(f.Syntax(), fmt.Sprintf("from %d to %d", f.Min, f.Max)) {
				t.Errorf("%s: the fix %q does not write the range", b, f.Syntax())
			}
			for _, v := range c.refused {
				got, p := checkOne(t, "--"+c.flag+"="+v, b)
				if got != rejected || !strings.Contains(p.Message, c.want) || !strings.Contains(p.Message, strings.Trim(v, "' +")) {
					t.Errorf("%s: --%s=%s: %s (%v), want refused: %q", b, c.flag, v, got, p, c.want)
				}
			}
			for _, v := range c.accepted {
				if got, p := checkOne(t, "--"+c.flag+"="+v, b); got != accepted {
					t.Errorf("%s: --%s=%s: %s (%v), want accepted", b, c.flag, v, got, p)
				}
			}
		}
	}
	// A build without the flag reports it as absent, not out of range.
	if got, p := checkOne(t, "--xla_cpu_parallel_codegen_split_count=-1", JAX0425); got != rejected || !strings.Contains(p.Message, "too new") {
		t.Errorf("jax-0.4.25: %s (%v), want the flag reported as too new", got, p)
	}
}
