package flags

import "fmt"

// Tutorial2024 is the XLA_FLAGS of the JAX tutorial "Training Larger Models on a Single GPU"
// (2024, jax 0.4.25). Two of its flags no longer exist, and XLA aborts on them; Legacy2024
// translates the rest.
const Tutorial2024 = "--xla_gpu_enable_triton_softmax_fusion=true --xla_gpu_triton_gemm_any=false " +
	"--xla_gpu_enable_async_collectives=true --xla_gpu_enable_latency_hiding_scheduler=true " +
	"--xla_gpu_enable_highest_priority_async_stream=true"

// tutorialBuild is the build the tutorial ran on: its defaults tell what the flags meant then.
const tutorialBuild = JAX0425

// Legacy2024 carries the intent of Tutorial2024 over to a build: each flag the build still
// defines is kept with the tutorial's value; each one it removed is dropped. One warning is
// given per dropped flag (naming what replaced it) and per kept flag that now reverts the
// build's default (the tutorial's value was the 2024 default but no longer is:
// xla_gpu_triton_gemm_any=false turns off Triton GEMMs that are on by default today). On
// jax-0.4.25 it is the tutorial's flags, without warnings. GPU builds only.
func Legacy2024() Preset {
	return Preset{name: "legacy-2024", gpuOnly: true, perBuild: legacyFlags}
}

func legacyFlags(b Build) ([]presetFlag, []Problem) {
	settings, _ := Parse(Tutorial2024)
	var out []presetFlag
	var warnings []Problem
	for _, st := range settings.settings {
		then, _ := tutorialBuild.Lookup(st.Name)
		now, ok := b.Lookup(st.Name)
		switch {
		case !ok:
			why, fix := absentFlag(st.Name, b)
			warnings = append(warnings, Problem{Flag: st.Name, Build: b,
				Message: fmt.Sprintf("dropped the tutorial's --%s=%s: %s", st.Name, st.Value, why),
				Fix:     fix})
		case st.Value == then.Default && now.DefaultComputed == "" && now.Default != then.Default:
			warnings = append(warnings, Problem{Flag: st.Name, Build: b,
				Message: fmt.Sprintf("kept the tutorial's --%s=%s, which was the default in %s but reverts %s's default (%s)",
					st.Name, st.Value, tutorialBuild, b, now.Default),
				Fix: fmt.Sprintf("leave --%s out to get %s's default", st.Name, b)})
			out = append(out, presetFlag{st.Name, st.Value, fmt.Sprintf("the tutorial's flag; reverts %s's default %s", b, now.Default)})
		case st.Value == now.Default:
			out = append(out, presetFlag{st.Name, st.Value, "the tutorial's flag; already the default"})
		default:
			out = append(out, presetFlag{st.Name, st.Value, "the tutorial's flag"})
		}
	}
	return out, warnings
}
