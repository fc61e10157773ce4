package flags

import (
	"errors"
	"strings"
	"testing"
)

var gpuBuilds = []Build{JAX0425, CUDA011, Head}

// TestPresetsOnTheirBuilds checks every preset on every build: the flags it sets where it
// claims to work, a warning and no flags on CPU builds for GPU presets, and an error where the
// build lacks a flag the preset needs.
func TestPresetsOnTheirBuilds(t *testing.T) {
	tests := []struct {
		preset  Preset
		want    string           // rendered flags on the builds it supports
		cpu     bool             // it sets flags on CPU builds too
		failsOn map[Build]string // builds it cannot serve, with a phrase of the error
	}{
		{preset: SingleGPUTraining(), want: "--xla_gpu_enable_latency_hiding_scheduler=true"},
		{preset: Memory(90), want: "--xla_gpu_memory_limit_slop_factor=90"},
		{preset: NoAutoRemat(), want: "--xla_disable_hlo_passes=rematerialization", cpu: true},
		{preset: NoCommandBuffers(), want: "--xla_gpu_enable_command_buffer="},
		{preset: FastCompile(0), want: "--xla_gpu_autotune_level=0"},
		{preset: AutotuneCache("/cache dir"), want: "--xla_gpu_per_fusion_autotune_cache_dir='/cache dir'",
			failsOn: map[Build]string{JAX0425: "too new for jax-0.4.25"}},
		{preset: Dump("/tmp/d", "jit_train.*", "after.*"), cpu: true,
			want: "--xla_dump_to=/tmp/d --xla_dump_hlo_module_re=jit_train.* --xla_dump_hlo_pass_re=after.*"},
		{preset: Dump("/tmp/d", "", ""), want: "--xla_dump_to=/tmp/d", cpu: true},
		{preset: Deterministic(), want: "--xla_gpu_deterministic_ops=true"},
	}
	for _, tt := range tests {
		for _, b := range Builds() {
			s, warnings, err := tt.preset.For(b)
			switch {
			case tt.failsOn[b] != "":
				if err == nil || !strings.Contains(err.Error(), tt.failsOn[b]) {
					t.Errorf("%s on %s: %v, want an error with %q", tt.preset.Name(), b, err, tt.failsOn[b])
				}
			case err != nil:
				t.Errorf("%s on %s: %v", tt.preset.Name(), b, err)
			case b.CPU() && !tt.cpu:
				if s.Len() != 0 || len(warnings) != 1 || !strings.Contains(warnings[0].Message, "sets nothing") {
					t.Errorf("%s on %s = %q, %v; want nothing and one warning", tt.preset.Name(), b, s, warnings)
				}
			default:
				if s.String() != tt.want || len(warnings) != 0 {
					t.Errorf("%s on %s = %q, %v; want %q", tt.preset.Name(), b, s, warnings, tt.want)
				}
				for _, st := range s.Settings() {
					if st.Source != "preset "+tt.preset.Name() || st.Reason == "" {
						t.Errorf("%s on %s: setting %+v lacks its source or reason", tt.preset.Name(), b, st)
					}
				}
			}
		}
	}
}

func TestPresetArguments(t *testing.T) {
	tests := []struct {
		preset Preset
		inErr  string
	}{
		{Memory(0), "percentage from 1 to 100"},
		{Memory(101), "percentage from 1 to 100"},
		{FastCompile(4), "does not compile faster"},
		{FastCompile(-1), "does not compile faster"},
		{AutotuneCache(""), "needs a folder"},
		{Dump("", "", ""), "needs a folder"},
		{Dump("/d", "(", ""), "not a regular expression"},
	}
	for _, tt := range tests {
		_, _, err := tt.preset.For(CUDA011)
		var ps Problems
		if !errors.As(err, &ps) || !strings.Contains(err.Error(), tt.inErr) || ps[0].Fix == "" {
			t.Errorf("%s: %v, want a problem with %q and a fix", tt.preset.Name(), err, tt.inErr)
		}
	}
}

// TestLegacy2024Warnings pins what Legacy2024 keeps and the number of warnings per build: one
// per dropped flag and per flag that now reverts the build's default.
func TestLegacy2024Warnings(t *testing.T) {
	tests := []struct {
		build    Build
		want     string
		warnings int
	}{
		{JAX0425, Tutorial2024, 0},
		{CPU083, "", 1}, // the GPU preset sets nothing on a CPU plugin
		{CPU0115, "", 1},
		{CUDA011, "--xla_gpu_triton_gemm_any=false --xla_gpu_enable_latency_hiding_scheduler=true --xla_gpu_enable_highest_priority_async_stream=true", 3},
		{Head, "--xla_gpu_triton_gemm_any=false --xla_gpu_enable_latency_hiding_scheduler=true --xla_gpu_enable_highest_priority_async_stream=true", 3},
	}
	for _, tt := range tests {
		s, warnings, err := Legacy2024().For(tt.build)
		if err != nil {
			t.Fatalf("Legacy2024 on %s: %v", tt.build, err)
		}
		if s.String() != tt.want || len(warnings) != tt.warnings {
			t.Errorf("Legacy2024 on %s = %q with %d warnings %v; want %q with %d", tt.build, s, len(warnings), warnings, tt.want, tt.warnings)
		}
	}
	_, warnings, _ := Legacy2024().For(CUDA011)
	var dropped, reverted []string
	for _, w := range warnings {
		switch {
		case strings.HasPrefix(w.Message, "dropped"):
			dropped = append(dropped, w.Flag)
		case strings.Contains(w.Message, "reverts"):
			reverted = append(reverted, w.Flag)
		}
	}
	if strings.Join(dropped, " ") != "xla_gpu_enable_triton_softmax_fusion xla_gpu_enable_async_collectives" ||
		strings.Join(reverted, " ") != "xla_gpu_triton_gemm_any" {
		t.Errorf("Legacy2024 on cuda-0.11 dropped %v and reverted %v", dropped, reverted)
	}
}

// TestResolve checks that presets come first, the user's XLA_FLAGS override them, and problems
// from either side are all reported.
func TestResolve(t *testing.T) {
	user, err := ParseEnv("--xla_gpu_memory_limit_slop_factor=80 --xla_dump_to=/mine")
	if err != nil {
		t.Fatal(err)
	}
	s, warnings, err := Resolve(CUDA011, user, SingleGPUTraining(), Memory(90), Dump("/theirs", "", ""))
	if err != nil || len(warnings) != 0 {
		t.Fatalf("Resolve: %v, %v", warnings, err)
	}
	want := "--xla_gpu_enable_latency_hiding_scheduler=true --xla_gpu_memory_limit_slop_factor=80 --xla_dump_to=/mine"
	if s.String() != want {
		t.Errorf("Resolve = %s, want %s", s, want)
	}

	bad, _ := ParseEnv("--xla_gpu_enable_async_collectives=true")
	_, _, err = Resolve(JAX0425, bad, AutotuneCache("/c"))
	var ps Problems
	if !errors.As(err, &ps) || len(ps) != 1 {
		t.Fatalf("Resolve on jax-0.4.25 = %v, want the preset's problem only (the flag exists there)", err)
	}
	_, _, err = Resolve(CUDA011, bad, Memory(500))
	if !errors.As(err, &ps) || len(ps) != 2 {
		t.Errorf("Resolve = %v, want the preset's and the user's problems", err)
	}
	for _, b := range []Build{CPU083, CPU0115} {
		s, warnings, err := Resolve(b, Set{}, Memory(90), Deterministic(), NoAutoRemat(), Dump("/tmp/d", "jit_.*", ""))
		if err != nil || len(warnings) != 2 || s.String() != "--xla_disable_hlo_passes=rematerialization --xla_dump_to=/tmp/d --xla_dump_hlo_module_re=jit_.*" {
			t.Errorf("Resolve on %s = %q, %v, %v; want two skipped GPU presets, no-auto-remat and dump", b, s, warnings, err)
		}
	}
}

func TestParsePreset(t *testing.T) {
	tests := []struct{ spec, name, inErr string }{
		{spec: "single-gpu-training", name: "single-gpu-training"},
		{spec: "SingleGPUTraining", name: "single-gpu-training"},
		{spec: "memory=90", name: "memory=90"},
		{spec: "no_auto_remat", name: "no-auto-remat"},
		{spec: "no-command-buffers", name: "no-command-buffers"},
		{spec: "fast-compile", name: "fast-compile=0"},
		{spec: "fast-compile=2", name: "fast-compile=2"},
		{spec: "autotune-cache=/c", name: "autotune-cache=/c"},
		{spec: "dump=/d", name: "dump=/d"},
		{spec: "dump=/d,jit.*", name: "dump=/d,jit.*"},
		{spec: "dump=/d,,a{1,2}", name: "dump=/d,,a{1,2}"},
		{spec: "deterministic", name: "deterministic"},
		{spec: "Legacy2024", name: "legacy-2024"},
		{spec: "memory", inErr: "needs a number"},
		{spec: "memory=lots", inErr: "whole number"},
		{spec: "deterministic=yes", inErr: "takes no argument"},
		{spec: "autotune-cache", inErr: "needs a folder"},
		{spec: "dump", inErr: "needs a folder"},
		{spec: "turbo", inErr: "unknown preset"},
	}
	for _, tt := range tests {
		p, err := ParsePreset(tt.spec)
		if tt.inErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.inErr) {
				t.Errorf("ParsePreset(%q) = %v, want an error with %q", tt.spec, err, tt.inErr)
			}
			continue
		}
		if err != nil || p.Name() != tt.name {
			t.Errorf("ParsePreset(%q) = %q, %v; want %q", tt.spec, p.Name(), err, tt.name)
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(PresetUsage()), "\n") {
		spec := strings.Fields(line)[0]
		spec = strings.NewReplacer("[", "", "]", "", "PERCENT", "90", "LEVEL", "1", "DIR", "/d", "MODULE_RE", "m", "PASS_RE", "p").Replace(spec)
		if _, err := ParsePreset(spec); err != nil {
			t.Errorf("PresetUsage lists %q, which ParsePreset rejects: %v", line, err)
		}
	}
}
