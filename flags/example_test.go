package flags_test

import (
	"fmt"

	"github.com/onegpu/onegpu/flags"
)

// A program that creates an XLA backend resolves its presets under the user's XLA_FLAGS,
// checked against the plugin's build, then applies them once (see Apply).
func Example() {
	user, _ := flags.ParseEnv("--xla_gpu_memory_limit_slop_factor=80") // usually flags.Environment()
	set, warnings, err := flags.Resolve(flags.CUDA011, user, flags.SingleGPUTraining(), flags.Memory(90))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(set)
	for _, st := range set.Settings() {
		fmt.Printf("%s from %s", st.Name, st.Source)
		if st.Overrides != "" {
			fmt.Printf(", overriding %s", st.Overrides)
		}
		fmt.Println()
	}
	fmt.Println(len(warnings), "warnings")
	// Output:
	// --xla_gpu_enable_latency_hiding_scheduler=true --xla_gpu_memory_limit_slop_factor=80
	// xla_gpu_enable_latency_hiding_scheduler from preset single-gpu-training
	// xla_gpu_memory_limit_slop_factor from XLA_FLAGS, overriding --xla_gpu_memory_limit_slop_factor=90 (preset memory=90)
	// 0 warnings
}

// The tutorial's flags pass on the build it used and abort today's XLA.
func ExampleSet_Check() {
	tutorial, _ := flags.Parse(flags.Tutorial2024)
	for _, b := range []flags.Build{flags.JAX0425, flags.CUDA011} {
		_, err := tutorial.Check(b)
		if problems, ok := err.(flags.Problems); ok {
			for _, p := range problems {
				fmt.Printf("%s on %s: %s\n", p.Flag, b, p.Message)
			}
			continue
		}
		fmt.Printf("%s accepts them\n", b)
	}
	// Output:
	// jax-0.4.25 accepts them
	// xla_gpu_enable_triton_softmax_fusion on cuda-0.11: removed by cpu-0.83 (last defined by jax-0.4.25): XLA aborts the process with "Unknown flags in XLA_FLAGS"
	// xla_gpu_enable_async_collectives on cuda-0.11: removed by cpu-0.83 (last defined by jax-0.4.25): XLA aborts the process with "Unknown flags in XLA_FLAGS"
}

// A value written after a blank stops XLA's parsing: XLA silently ignores the rest.
func ExampleParse() {
	_, err := flags.Parse("--xla_gpu_autotune_level 0 --xla_dump_to=/tmp/dump")
	for _, p := range err.(flags.Problems) {
		fmt.Println(p.Fix)
	}
	// Output:
	// write --xla_gpu_autotune_level=0
}

// Legacy2024 keeps what still exists of the tutorial's flags, with a warning per change.
func ExampleLegacy2024() {
	set, warnings, _ := flags.Legacy2024().For(flags.CUDA011)
	fmt.Println(set)
	for _, w := range warnings {
		fmt.Println(w.Flag)
	}
	// Output:
	// --xla_gpu_triton_gemm_any=false --xla_gpu_enable_latency_hiding_scheduler=true --xla_gpu_enable_highest_priority_async_stream=true
	// xla_gpu_enable_triton_softmax_fusion
	// xla_gpu_triton_gemm_any
	// xla_gpu_enable_async_collectives
}

// Client options become the named values go-xla's Plugin.NewClient and GoMLX's
// xla.NewWithOptions take.
func ExampleClientOptions_NamedValues() {
	options := flags.ClientOptions{Allocator: flags.AllocatorBFC, MemoryFraction: 0.9, Preallocate: flags.PreallocateOff}
	values, err := options.NamedValues(flags.CUDA011)
	fmt.Println(values, err)
	// Output:
	// map[allocator:bfc memory_fraction:0.9 preallocate:false] <nil>
}

// Once a plugin is loaded, its platform and PJRT C API version tell its build.
func ExampleBuildForPlugin() {
	b, err := flags.BuildForPlugin("cpu", 0, 83)
	fmt.Println(b, err)
	_, err = flags.BuildForPlugin("cpu", 0, 90)
	fmt.Println(err != nil)
	// Output:
	// cpu-0.83 <nil>
	// true
}
