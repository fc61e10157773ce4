package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/onegpu/onegpu/flags"
)

// runFlagsOut runs `onegpu flags args...` with no plugin configured and returns its report
// and exit status.
func runFlagsOut(t *testing.T, xlaFlags string, args ...string) (string, int) {
	t.Helper()
	t.Setenv(flags.EnvVar, xlaFlags)
	t.Setenv(flags.PluginEnv, "")
	t.Setenv(flags.GoMLXBackendEnv, "")
	var out bytes.Buffer
	err := runFlags(args, &out)
	var exit *exitError
	switch {
	case err == nil:
		return out.String(), 0
	case errors.As(err, &exit):
		return out.String(), exit.code
	}
	t.Fatalf("onegpu flags %q: %v", args, err)
	return "", 0
}

func TestFlagsShow(t *testing.T) {
	tests := []struct {
		name     string
		xlaFlags string
		args     []string
		code     int
		want     []string // lines or fragments the report holds
	}{
		{name: "nothing set", want: []string{"build cuda-0.11", "XLA_FLAGS is empty"}},
		{name: "presets with explanations", args: []string{"--preset", "single-gpu-training", "--preset=memory=90"},
			want: []string{
				"XLA_FLAGS='--xla_gpu_enable_latency_hiding_scheduler=true --xla_gpu_memory_limit_slop_factor=90'",
				"--xla_gpu_memory_limit_slop_factor=90           preset memory=90: schedule for 90% of device memory",
			}},
		{name: "the user overrides a preset", xlaFlags: "--xla_gpu_memory_limit_slop_factor=80", args: []string{"--preset", "memory=90"},
			want: []string{"XLA_FLAGS: int32 flag, default 95; overrides --xla_gpu_memory_limit_slop_factor=90 (preset memory=90)"}},
		{name: "a bad user flag fails", xlaFlags: "--xla_gpu_enable_async_collectives=true", code: 1,
			want: []string{"would abort", "xla_gpu_enable_async_collectives: removed by cpu-0.83", "fix: drop it"}},
		{name: "a GPU preset on a CPU build warns", args: []string{"--build", "cpu-0.83", "--preset", "deterministic"},
			want: []string{"build cpu-0.83", "warning: preset deterministic (cpu-0.83)"}},
		{name: "legacy warnings", args: []string{"--preset", "legacy-2024"},
			want: []string{"warning: xla_gpu_enable_triton_softmax_fusion", "warning: xla_gpu_triton_gemm_any", "warning: xla_gpu_enable_async_collectives"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, code := runFlagsOut(t, tt.xlaFlags, tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d:\n%s", code, tt.code, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("report lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

func TestFlagsShowErrors(t *testing.T) {
	var out bytes.Buffer
	for _, args := range [][]string{
		{"--build", "cuda-12"},
		{"--preset", "turbo"},
		{"--xla_gpu_autotune_level=2"},
		{"stray"},
	} {
		if err := runFlags(args, &out); err == nil {
			t.Errorf("onegpu flags %q succeeded", args)
		}
	}
}

func TestFlagsCheck(t *testing.T) {
	tests := []struct {
		name     string
		xlaFlags string
		args     []string
		code     int
		want     []string
	}{
		{name: "the tutorial on today's build", args: []string{flags.Tutorial2024}, code: 1,
			want: []string{"rejected: XLA of build cuda-0.11", "xla_gpu_enable_triton_softmax_fusion: removed", "xla_gpu_enable_async_collectives: removed"}},
		{name: "the tutorial on its own build", args: []string{"--build", "jax-0.4.25", flags.Tutorial2024},
			want: []string{"ok: XLA of build jax-0.4.25", "accepts these 5 flags"}},
		{name: "flags after the string", args: []string{"--xla_gpu_autotune_level=2", "--build=cpu-0.83"},
			want: []string{"ok: XLA of build cpu-0.83", "--xla_gpu_autotune_level=2  XLA_FLAGS: int32 flag, default 4"}},
		{name: "a value after a blank", args: []string{"--xla_gpu_autotune_level 0"}, code: 1,
			want: []string{"blank before its value", "fix: write --xla_gpu_autotune_level=0"}},
		{name: "split by the shell", args: []string{"--xla_gpu_autotune_level", "0"}, code: 1,
			want: []string{"fix: write --xla_gpu_autotune_level=0"}},
		{name: "after --", args: []string{"--build", "head", "--", "--json"}, code: 1,
			want: []string{"json: not a flag of head"}},
		{name: "no string checks XLA_FLAGS", xlaFlags: "--xla_gpu_deterministic_ops", want: []string{"accepts these 1 flags"}},
		{name: "empty", args: []string{""}, want: []string{"ok: no flags"}},
		{name: "an LLVM option XLA would hand to LLVM at compile time", args: []string{"--xla_backend_extra_options=bogus"}, code: 1,
			want: []string{`xla_backend_extra_options: item "bogus"`, "LLVM ends the process", "fix: --xla_backend_extra_options=xla_KEY"}},
		{name: "a warning keeps exit 0", args: []string{"--xla_gpu_enable_cudnn_fmha=false"},
			want: []string{"warning: xla_gpu_enable_cudnn_fmha (cuda-0.11): deprecated"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, code := runFlagsOut(t, tt.xlaFlags, append([]string{"check"}, tt.args...)...)
			if code != tt.code {
				t.Errorf("exit %d, want %d:\n%s", code, tt.code, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("report lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

func TestFlagsJSON(t *testing.T) {
	out, code := runFlagsOut(t, "", "check", "--json", "--xla_gpu_enable_async_collectives=true --xla_gpu_autotune_level=1")
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	var report flagsReport
	if err := json.Unmarshal([]byte(out), &report); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if report.Accepted || len(report.Errors) != 1 || report.Errors[0].Flag != "xla_gpu_enable_async_collectives" ||
		report.Errors[0].Build != flags.CUDA011 || len(report.Settings) != 2 || report.Input == nil {
		t.Errorf("report = %+v", report)
	}

	out, code = runFlagsOut(t, "", "--json", "--preset", "memory=90")
	if err := json.Unmarshal([]byte(out), &report); err != nil || code != 0 {
		t.Fatalf("exit %d, %v:\n%s", code, err, out)
	}
	if !report.Accepted || report.XLAFlags != "--xla_gpu_memory_limit_slop_factor=90" ||
		len(report.Presets) != 1 || report.Settings[0].Source != "preset memory=90" {
		t.Errorf("report = %+v", report)
	}
}

func TestSplitCheckArgs(t *testing.T) {
	ours, text := splitCheckArgs([]string{"--xla_a=1", "--build", "head", "-json", "--xla_b", "--", "--build"})
	if strings.Join(ours, " ") != "--build head -json" || strings.Join(text, " ") != "--xla_a=1 --xla_b --build" {
		t.Errorf("splitCheckArgs = %q, %q", ours, text)
	}
}
