package flags

import (
	"os"
	"strings"
	"sync"
	"testing"
)

// resetPlugins forgets the plugins NotePluginCreated recorded, for the test's duration.
func resetPlugins(t *testing.T) {
	applyState.Lock()
	saved := applyState.plugins
	applyState.plugins = nil
	applyState.Unlock()
	t.Cleanup(func() {
		applyState.Lock()
		applyState.plugins = saved
		applyState.Unlock()
	})
}

func TestApply(t *testing.T) {
	resetPlugins(t)
	t.Setenv(EnvVar, "")
	t.Setenv(CUDAChecksEnv, "")
	set, _, err := Resolve(CUDA011, Set{}, SingleGPUTraining(), Dump("/tmp/a b", "", ""))
	if err != nil {
		t.Fatal(err)
	}
	applied, warnings, err := Apply(set)
	if err != nil || len(warnings) != 0 {
		t.Fatalf("Apply: %v, %v", warnings, err)
	}
	want := "--xla_gpu_enable_latency_hiding_scheduler=true --xla_dump_to='/tmp/a b'"
	if applied.XLAFlags != want || os.Getenv(EnvVar) != want {
		t.Errorf("XLA_FLAGS = %q (reported %q), want %q", os.Getenv(EnvVar), applied.XLAFlags, want)
	}
	if !applied.CUDAChecksOff || os.Getenv(CUDAChecksEnv) != "0" {
		t.Errorf("GOPJRT_CUDA_CHECKS = %q (reported %v), want 0", os.Getenv(CUDAChecksEnv), applied.CUDAChecksOff)
	}
	// What Apply wrote reads back as the same flags.
	back, err := Environment()
	if err != nil || back.String() != want {
		t.Errorf("Environment() after Apply = %q, %v", back, err)
	}
}

func TestApplyCUDADataDir(t *testing.T) {
	resetPlugins(t)
	t.Setenv(EnvVar, "")
	t.Setenv(CUDAChecksEnv, "")
	set := mustParse(t, "--xla_gpu_cuda_data_dir=/usr/local/cuda")
	applied, _, err := Apply(set)
	if err != nil || applied.CUDAChecksOff || os.Getenv(CUDAChecksEnv) != "" {
		t.Errorf("Apply with an explicit data dir touched %s: %+v, %v", CUDAChecksEnv, applied, err)
	}

	t.Setenv(CUDAChecksEnv, "yes")
	_, warnings, err := Apply(Set{})
	if err != nil || len(warnings) != 1 || warnings[0].Flag != CUDAChecksEnv {
		t.Errorf("Apply with %s=yes: %v, %v; want one warning", CUDAChecksEnv, warnings, err)
	}
	if os.Getenv(CUDAChecksEnv) != "yes" {
		t.Errorf("Apply overrode the user's %s", CUDAChecksEnv)
	}

	t.Setenv(CUDAChecksEnv, "no")
	if applied, warnings, _ := Apply(Set{}); applied.CUDAChecksOff || len(warnings) != 0 {
		t.Errorf("Apply with checks already off: %+v, %v", applied, warnings)
	}
}

func TestApplyAfterPluginWarns(t *testing.T) {
	resetPlugins(t)
	t.Setenv(EnvVar, "--xla_gpu_autotune_level=1")
	t.Setenv(CUDAChecksEnv, "0")
	NotePluginCreated("cuda")
	NotePluginCreated("cuda")
	if got := PluginsCreated(); len(got) != 1 || got[0] != "cuda" {
		t.Errorf("PluginsCreated() = %v, want [cuda]", got)
	}
	// The same flags again change nothing: no warning.
	if _, warnings, _ := Apply(mustParse(t, "--xla_gpu_autotune_level=1")); len(warnings) != 0 {
		t.Errorf("re-applying the same flags warned: %v", warnings)
	}
	_, warnings, err := Apply(mustParse(t, "--xla_gpu_autotune_level=2"))
	if err != nil || len(warnings) != 1 || !strings.Contains(warnings[0].Message, "plugin cuda was created before") {
		t.Errorf("Apply after a plugin: %v, %v; want one warning", warnings, err)
	}
}

func TestApplyRefusesDroppedFlags(t *testing.T) {
	resetPlugins(t)
	t.Setenv(EnvVar, "before")
	bad, _ := Parse("--xla_gpu_autotune_level 0")
	if _, _, err := Apply(bad); err == nil {
		t.Error("Apply accepted flags XLA would drop")
	}
	if os.Getenv(EnvVar) != "before" {
		t.Error("a refused Apply changed XLA_FLAGS")
	}
}

// TestApplyConcurrently runs Apply and NotePluginCreated from several goroutines: the final
// XLA_FLAGS is one of the sets applied, and every plugin is recorded.
func TestApplyConcurrently(t *testing.T) {
	resetPlugins(t)
	t.Setenv(EnvVar, "")
	t.Setenv(CUDAChecksEnv, "0")
	sets := []string{"--xla_gpu_autotune_level=1", "--xla_gpu_autotune_level=2", "--xla_dump_to=/x"}
	var wg sync.WaitGroup
	for i := range 30 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			s, _ := Parse(sets[i%len(sets)])
			if _, _, err := Apply(s); err != nil {
				t.Error(err)
			}
		}()
		go func() {
			defer wg.Done()
			NotePluginCreated(string(rune('a' + i%5)))
		}()
	}
	wg.Wait()
	got := os.Getenv(EnvVar)
	if got != sets[0] && got != sets[1] && got != sets[2] {
		t.Errorf("XLA_FLAGS = %q, want one of %q", got, sets)
	}
	if n := len(PluginsCreated()); n != 5 {
		t.Errorf("%d plugins recorded, want 5", n)
	}
}
