// Package flags makes sure the XLA_FLAGS a onegpu process hands to XLA can never kill it, and
// holds the PJRT client options that decide how device memory is held.
//
// XLA reads XLA_FLAGS once per plugin, when the plugin's first client is created, and aborts
// the whole process on a flag it does not know ("Unknown flags in XLA_FLAGS: ..."); it silently
// ignores everything after a token that does not start with '-', such as the value of
// `--flag value` written with a space. Which flags exist depends on the build of XLA: two of
// the five flags of the 2024 tutorial are gone from today's XLA. So this package:
//
//   - holds typed flag tables for each XLA build it knows (Build, Flag), generated from
//     flags/tables by `go generate`: jax-0.4.25, cpu-0.83 (go-xla's CPU plugin), cuda-0.11 (the
//     default), cpu-0.115 (lammps-jax-pjrt-cpu 0.11.2, the CPU plugin CI installs, whose table
//     flags/internal/plugintable derived by asking the plugin) and head (XLA's source);
//   - splits XLA_FLAGS exactly as XLA does (Parse, ParseEnv, Environment) and checks every
//     setting against a build (Set.Check), naming the flag, the build and the fix. Values of the
//     flags XLA parses with setters of their own (enums, lists of names, xla_fuel, ...) must be
//     ones the build is known to take (Flag.Form, Flag.Values: probed from the plugin for
//     cpu-0.115); where onegpu does not know them for a build, Check refuses every explicit value.
//     Numbers must be in the range XLA handles where its code fails or hangs outside one
//     (Flag.Ranged, from flags/tables/ranges.tsv: --xla_cpu_parallel_codegen_split_count takes 1
//     to 65536);
//   - offers presets for one-GPU training (SingleGPUTraining, Memory, NoAutoRemat,
//     NoCommandBuffers, FastCompile, AutotuneCache, Dump, Deterministic, and Legacy2024 for
//     the tutorial's flags), merged under the user's XLA_FLAGS by Resolve;
//   - sets XLA_FLAGS once, before any plugin exists (Apply, NotePluginCreated);
//   - types the GPU client's memory options (ClientOptions).
//
// A program that creates an XLA backend does, in order:
//
//	b, _ := flags.DefaultBuild() // or the build its configuration names
//	user, err := flags.Environment()
//	set, warnings, err := flags.Resolve(b, user, flags.SingleGPUTraining(), flags.Memory(90))
//	_, more, err := flags.Apply(set)
//	options, err := flags.ClientOptions{MemoryFraction: 0.9}.NamedValues(b)
//	backend, err := xla.NewWithOptions(plugin, options)
//	flags.NotePluginCreated(plugin)
//
// With ONEGPU_PJRT_PLUGIN naming a CPU plugin of a known build, `go test ./flags/` also holds
// Check to what that plugin does (TestPluginJudge): texts Check accepts must let a child
// process create a client, texts it rejects must end it, enum and list values included.
package flags
