package flags

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Preset is a named group of XLA flags for one purpose, written for each build it supports.
// Presets that tune XLA's GPU compiler set nothing on a CPU build (For says so in a warning),
// and a preset that needs a flag the build lacks is an error, never a silent skip.
type Preset struct {
	name    string
	gpuOnly bool
	invalid *Problem // a bad argument, reported by For
	flags   []presetFlag
	// perBuild, when set, computes the flags for a build (Legacy2024) instead of flags.
	perBuild func(b Build) ([]presetFlag, []Problem)
}

type presetFlag struct{ name, value, reason string }

// Name returns the preset as the CLI writes it, arguments included: "memory=90".
func (p Preset) Name() string { return p.name }

// For returns the preset's flags for build b, with warnings for what it leaves out. The error
// (a Problems) names a bad argument or a flag the preset needs that b does not define.
func (p Preset) For(b Build) (Set, []Problem, error) {
	if _, ok := infoOf(b); !ok {
		_, err := ParseBuild(string(b))
		return Set{}, nil, err
	}
	source := "preset " + p.name
	if p.invalid != nil {
		invalid := *p.invalid
		invalid.Build = b
		return Set{}, nil, Problems{invalid}
	}
	if p.gpuOnly && b.CPU() {
		return Set{}, []Problem{{Flag: source, Build: b,
			Message: "it tunes XLA's GPU compiler, which a CPU plugin does not run, so it sets nothing here",
			Fix:     "leave it out of CPU runs"}}, nil
	}
	flags, warnings := p.flags, []Problem(nil)
	if p.perBuild != nil {
		flags, warnings = p.perBuild(b)
	}
	var s Set
	var missing []Problem
	for _, f := range flags {
		if _, ok := b.Lookup(f.name); !ok {
			why, _ := absentFlag(f.name, b)
			missing = append(missing, Problem{Flag: f.name, Build: b,
				Message: source + " needs this flag, which is " + why,
				Fix:     "leave the preset out for " + string(b)})
			continue
		}
		s.settings = append(s.settings, newSetting(f.name, f.value, source, f.reason))
	}
	if len(missing) > 0 {
		return Set{}, warnings, Problems(missing)
	}
	checkWarnings, err := s.Check(b)
	return s, append(warnings, checkWarnings...), err
}

// Resolve returns the flags onegpu hands to build b: the presets' flags in order, then the
// user's (usually Environment()), which override them. Every setting is checked against b; the
// error (a Problems) lists everything that would abort the process or be dropped silently, so a
// nil error means XLA of build b accepts the result.
func Resolve(b Build, user Set, presets ...Preset) (Set, []Problem, error) {
	var parts []Set
	var warnings, errs []Problem
	for _, p := range presets {
		s, w, err := p.For(b)
		warnings = append(warnings, w...)
		if err != nil {
			ps, ok := err.(Problems)
			if !ok {
				return Set{}, warnings, err
			}
			errs = append(errs, ps...)
		}
		parts = append(parts, s)
	}
	w, err := user.Check(b)
	warnings = append(warnings, w...)
	if err != nil {
		ps, ok := err.(Problems)
		if !ok {
			return Set{}, warnings, err
		}
		errs = append(errs, ps...)
	}
	return Merge(append(parts, user)...), warnings, errorOf(errs)
}

func invalidPreset(name, message, fix string) Preset {
	return Preset{name: name, invalid: &Problem{Flag: "preset " + name, Message: message, Fix: fix}}
}

// SingleGPUTraining turns on XLA's latency-hiding scheduler, which overlaps copies and compute
// within the memory limit (see Memory). It is what the 2024 tutorial's five flags still mean on
// one GPU today: the collective flags have nothing to do there, and Triton softmax fusion is
// XLA's default. GPU builds only.
func SingleGPUTraining() Preset {
	return Preset{name: "single-gpu-training", gpuOnly: true, flags: []presetFlag{
		{"xla_gpu_enable_latency_hiding_scheduler", "true", "overlap copies and compute, within the scheduler's memory limit"},
	}}
}

// Memory sets the share of device memory, in percent (1 to 100, XLA's default 95), that XLA's
// GPU scheduler plans for. A lower share leaves headroom for fragmentation and for buffers
// outside the program, at the price of less overlap. GPU builds only.
func Memory(percent int) Preset {
	name := "memory=" + strconv.Itoa(percent)
	if percent < 1 || percent > 100 {
		return invalidPreset(name, fmt.Sprintf("%d is not a share of device memory: it must be a percentage from 1 to 100", percent),
			"memory=90 plans for 90% of the device")
	}
	return Preset{name: name, gpuOnly: true, flags: []presetFlag{
		{"xla_gpu_memory_limit_slop_factor", strconv.Itoa(percent),
			fmt.Sprintf("schedule for %d%% of device memory instead of 95%%", percent)},
	}}
}

// NoAutoRemat disables XLA's own rematerialization pass, so that only the recomputation the
// program asks for (onegpu's remat policies) happens and memory reports stay predictable.
func NoAutoRemat() Preset {
	return Preset{name: "no-auto-remat", flags: []presetFlag{
		{"xla_disable_hlo_passes", "rematerialization", "keep XLA from recomputing activations on its own"},
	}}
}

// NoCommandBuffers makes XLA launch kernels one by one instead of recording them into CUDA
// graphs: profiles become readable and graph memory is not held, at some launch cost. GPU
// builds only.
func NoCommandBuffers() Preset {
	return Preset{name: "no-command-buffers", gpuOnly: true, flags: []presetFlag{
		{"xla_gpu_enable_command_buffer", "", "launch kernels one by one instead of through CUDA graphs"},
	}}
}

// FastCompile lowers XLA's GPU autotuning to level (0 turns it off; XLA's default is 4) so that
// programs compile faster and may run slower. GPU builds only.
func FastCompile(level int) Preset {
	name := "fast-compile=" + strconv.Itoa(level)
	if level < 0 || level > 3 {
		return invalidPreset(name, fmt.Sprintf("autotune level %d does not compile faster: XLA's levels run from 0 (off) to 4 (the default)", level),
			"fast-compile=0 turns autotuning off")
	}
	return Preset{name: name, gpuOnly: true, flags: []presetFlag{
		{"xla_gpu_autotune_level", strconv.Itoa(level), fmt.Sprintf("autotune at level %d of 4 to compile faster", level)},
	}}
}

// AutotuneCache keeps XLA's per-fusion autotuning results in dir and reuses them in later runs,
// so that only the first compilation pays for autotuning. GPU builds that have
// xla_gpu_per_fusion_autotune_cache_dir only (not jax-0.4.25).
func AutotuneCache(dir string) Preset {
	name := "autotune-cache=" + dir
	if dir == "" {
		return invalidPreset(name, "the autotune cache needs a folder", "autotune-cache=/path/to/cache")
	}
	return Preset{name: name, gpuOnly: true, flags: []presetFlag{
		{"xla_gpu_per_fusion_autotune_cache_dir", dir, "reuse autotuning results across runs"},
	}}
}

// Dump makes XLA write its HLO modules under dir: only the modules whose name matches
// moduleRegexp (all of them when empty), and also after each pass that matches passRegexp (none
// when empty). The regular expressions use RE2 syntax, like Go's regexp.
func Dump(dir, moduleRegexp, passRegexp string) Preset {
	name := "dump=" + dir
	if moduleRegexp != "" || passRegexp != "" {
		name += "," + moduleRegexp
	}
	if passRegexp != "" {
		name += "," + passRegexp
	}
	if dir == "" {
		return invalidPreset(name, "the dump needs a folder", "dump=/tmp/xla_dump")
	}
	flags := []presetFlag{{"xla_dump_to", dir, "write the HLO of compiled programs here"}}
	for _, re := range []struct{ flag, expr, reason string }{
		{"xla_dump_hlo_module_re", moduleRegexp, "only the modules whose name matches"},
		{"xla_dump_hlo_pass_re", passRegexp, "also after each pass whose name matches"},
	} {
		if re.expr == "" {
			continue
		}
		if _, err := regexp.Compile(re.expr); err != nil {
			return invalidPreset(name, fmt.Sprintf("%q is not a regular expression for --%s: %v", re.expr, re.flag, err),
				"write an RE2 regular expression")
		}
		flags = append(flags, presetFlag{re.flag, re.expr, re.reason})
	}
	return Preset{name: name, flags: flags}
}

// Deterministic makes XLA's GPU results identical from run to run: no ops with
// nondeterministic atomics, and no autotuning. GPU builds only.
func Deterministic() Preset {
	return Preset{name: "deterministic", gpuOnly: true, flags: []presetFlag{
		{"xla_gpu_deterministic_ops", "true", "run-to-run identical results: no nondeterministic ops, no autotuning"},
	}}
}

// presetSpecs lists the presets as ParsePreset reads them, with what they are for.
var presetSpecs = []struct{ syntax, summary string }{
	{"single-gpu-training", "the latency-hiding scheduler: the tutorial's flags as they matter on one GPU today"},
	{"memory=PERCENT", "the share of device memory XLA's scheduler plans for (1-100, default 95)"},
	{"no-auto-remat", "disable XLA's own rematerialization pass"},
	{"no-command-buffers", "launch kernels one by one instead of through CUDA graphs"},
	{"fast-compile[=LEVEL]", "autotune at LEVEL 0-3 (default 0: off) instead of 4, to compile faster"},
	{"autotune-cache=DIR", "keep autotuning results in DIR across runs"},
	{"dump=DIR[,MODULE_RE[,PASS_RE]]", "dump HLO modules under DIR (the pass regexp may hold commas)"},
	{"deterministic", "run-to-run identical GPU results"},
	{"legacy-2024", "the 2024 tutorial's five flags translated to this build, with a warning per change"},
}

// PresetUsage describes the presets ParsePreset accepts, one per line.
func PresetUsage() string {
	var b strings.Builder
	for _, p := range presetSpecs {
		fmt.Fprintf(&b, "  %-32s %s\n", p.syntax, p.summary)
	}
	return b.String()
}

// ParsePreset reads a preset as the CLI writes it: a name, then for presets with arguments '='
// and the arguments separated by commas (see PresetUsage). Names ignore case, '-' and '_', so
// "SingleGPUTraining" and "single_gpu_training" both work.
func ParsePreset(spec string) (Preset, error) {
	name, arg, hasArg := strings.Cut(spec, "=")
	key := strings.NewReplacer("-", "", "_", "").Replace(strings.ToLower(strings.TrimSpace(name)))
	noArg := func(p Preset) (Preset, error) {
		if hasArg {
			return Preset{}, fmt.Errorf("preset %s takes no argument, got %q", p.name, arg)
		}
		return p, nil
	}
	needInt := func(def int, required bool) (int, error) {
		if !hasArg {
			if required {
				return 0, fmt.Errorf("preset %s needs a number: %s=N", name, name)
			}
			return def, nil
		}
		n, err := strconv.Atoi(strings.TrimSpace(arg))
		if err != nil {
			return 0, fmt.Errorf("preset %s takes a whole number, got %q", name, arg)
		}
		return n, nil
	}
	switch key {
	case "singlegputraining":
		return noArg(SingleGPUTraining())
	case "memory":
		n, err := needInt(0, true)
		if err != nil {
			return Preset{}, err
		}
		return Memory(n), nil
	case "noautoremat":
		return noArg(NoAutoRemat())
	case "nocommandbuffers":
		return noArg(NoCommandBuffers())
	case "fastcompile":
		n, err := needInt(0, false)
		if err != nil {
			return Preset{}, err
		}
		return FastCompile(n), nil
	case "autotunecache":
		if arg == "" {
			return Preset{}, fmt.Errorf("preset autotune-cache needs a folder: autotune-cache=DIR")
		}
		return AutotuneCache(arg), nil
	case "dump":
		parts := strings.SplitN(arg, ",", 3)
		if parts[0] == "" {
			return Preset{}, fmt.Errorf("preset dump needs a folder: dump=DIR[,MODULE_RE[,PASS_RE]]")
		}
		parts = append(parts, "", "")
		return Dump(parts[0], parts[1], parts[2]), nil
	case "deterministic":
		return noArg(Deterministic())
	case "legacy2024":
		return noArg(Legacy2024())
	}
	syntaxes := make([]string, len(presetSpecs))
	for i, p := range presetSpecs {
		syntaxes[i] = p.syntax
	}
	return Preset{}, fmt.Errorf("unknown preset %q: the presets are %s", spec, strings.Join(syntaxes, ", "))
}
