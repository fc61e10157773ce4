//go:build cgo

package pjrtprobe

import (
	"fmt"
	"os"

	"github.com/gomlx/go-xla/pkg/pjrt"
)

// RunChildIfAsked returns at once unless ChildEnv is set. When it is, it creates a client with
// the plugin ChildEnv names, which makes XLA parse XLA_FLAGS, prints the client's platform and
// the plugin's PJRT C API version, compiles and runs a small program when the parent asked for it
// (Prober.Compile; see compileAndRun), and exits: 0 when all of that works, 3 when the plugin cannot be loaded, 4 when the client cannot be
// created, 5 when the program does not compile or run right. XLA itself ends the process, with
// status 1, when it rejects XLA_FLAGS, and LLVM with status 1 on an option it does not know.
func RunChildIfAsked() {
	plugin, ok := os.LookupEnv(ChildEnv)
	if !ok {
		return
	}
	p, err := pjrt.GetPlugin(plugin)
	if err != nil {
		fmt.Fprintf(os.Stderr, "pjrtprobe: loading plugin %q: %v\n", plugin, err)
		os.Exit(3)
	}
	client, err := p.NewClient(nil)
	if err != nil {
		fmt.Fprintf(os.Stderr, "pjrtprobe: creating a client of plugin %q: %v\n", plugin, err)
		os.Exit(4)
	}
	major, minor := p.Version()
	fmt.Printf("%splatform=%s pjrt=%d.%d\n", childPrefix, client.Platform(), major, minor)
	if os.Getenv(compileEnv) != "1" {
		os.Exit(0)
	}
	if err := compileAndRun(client); err != nil {
		fmt.Fprintf(os.Stderr, "pjrtprobe: compiling and running a program with plugin %q: %v\n", plugin, err)
		os.Exit(5)
	}
	os.Exit(0)
}

// probeProgram is a small StableHLO program with the ops whose compilation reads flags beyond
// client creation (a dot, which goes through the backend's code generator and LLVM, and a
// reduction): x·x + sum(x), for x float32[4, 4].
const probeProgram = `module @probe {
  func.func @main(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
    %dot = stablehlo.dot_general %x, %x, contracting_dims = [1] x [0] : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
    %zero = stablehlo.constant dense<0.0> : tensor<f32>
    %sum = stablehlo.reduce(%x init: %zero) applies stablehlo.add across dimensions = [0, 1] : (tensor<4x4xf32>, tensor<f32>) -> tensor<f32>
    %b = stablehlo.broadcast_in_dim %sum, dims = [] : (tensor<f32>) -> tensor<4x4xf32>
    %out = stablehlo.add %dot, %b : tensor<4x4xf32>
    return %out : tensor<4x4xf32>
  }
}`

// compileAndRun compiles probeProgram and runs it once, checking its result: XLA reads some
// flags only when it compiles (xla_backend_extra_options goes to LLVM's option parser then, which
// ends the process on an option it does not know), so a client alone does not show that a flag
// is harmless.
func compileAndRun(client *pjrt.Client) error {
	exec, err := client.Compile().WithStableHLO([]byte(probeProgram)).Done()
	if err != nil {
		return fmt.Errorf("compile: %w", err)
	}
	x := make([]float32, 16)
	for i := range x {
		x[i] = float32(i % 3)
	}
	in, err := client.BufferFromHost().FromFlatDataWithDimensions(x, []int{4, 4}).Done()
	if err != nil {
		return err
	}
	outs, err := exec.Execute(in).Done()
	if err != nil {
		return fmt.Errorf("execute: %w", err)
	}
	got, _, err := pjrt.BufferToArray[float32](outs[0])
	if err != nil {
		return err
	}
	var sum float32
	for _, v := range x {
		sum += v
	}
	for i := range 4 {
		for j := range 4 {
			want := sum
			for k := range 4 {
				want += x[i*4+k] * x[k*4+j]
			}
			if got[i*4+j] != want {
				return fmt.Errorf("result [%d, %d] = %g, want %g", i, j, got[i*4+j], want)
			}
		}
	}
	return nil
}
