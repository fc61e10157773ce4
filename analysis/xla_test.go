package analysis_test

import (
	"testing"

	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/analysis"
)

// TestCompiledMemory compiles the tutorial MLP's train step with XLA and checks XLA's memory
// statistics against the program: XLA's arguments are exactly the parameters (weights, Adam
// state, batch) and its outputs exactly the loss and the updated variables (in a tuple).
func TestCompiledMemory(t *testing.T) {
	backend := requireXLA(t)
	step := measuredSteps()[0]
	p, err := analysis.ContextProgram(backend, context.New(), "mlp_step", step.shapes(), step.fn)
	if err != nil {
		t.Fatal(err)
	}
	estimate := analysis.Analyze(p)
	compiled, err := analysis.CompileProgram(p)
	if err != nil {
		t.Fatal(err)
	}
	// XLA returns several outputs as a tuple: their buffers plus a table of 8-byte pointers.
	outputs := int64(8 * len(p.Outputs))
	for _, o := range p.Outputs {
		outputs += int64(o.Shape().Memory())
	}
	t.Logf("XLA: %+v (total %.2f MiB); embedded estimate: peak %.2f MiB", compiled, mib(compiled.TotalBytes()), mib(estimate.PeakBytes))
	if compiled.ArgumentBytes != estimate.ArgumentBytes {
		t.Errorf("XLA counts %d argument bytes, the program's parameters hold %d", compiled.ArgumentBytes, estimate.ArgumentBytes)
	}
	if compiled.OutputBytes != outputs {
		t.Errorf("XLA counts %d output bytes, the program's outputs hold %d", compiled.OutputBytes, outputs)
	}
	if compiled.TemporaryBytes <= 0 {
		t.Errorf("XLA reports no temporary bytes for a train step")
	}
}

// TestCompiledMemoryNeedsXLA: asking the embedded backend for XLA's statistics is an error that says so.
func TestCompiledMemoryNeedsXLA(t *testing.T) {
	step := measuredSteps()[0]
	p, err := analysis.ContextProgram(embedded(), context.New(), "mlp_step", step.shapes(), step.fn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := analysis.CompileProgram(p); err == nil {
		t.Error("the embedded backend returned XLA statistics")
	} else {
		t.Log(err)
	}
}

// TestCompilePrograms compiles the measured steps at once and checks each one's statistics against
// the same step compiled alone, in order; a program the backend cannot report on fails the lot.
func TestCompilePrograms(t *testing.T) {
	backend := requireXLA(t)
	steps := measuredSteps()
	build := func() []*analysis.Program {
		ps := make([]*analysis.Program, len(steps))
		for i, step := range steps {
			p, err := analysis.ContextProgram(backend, context.New(), "step", step.shapes(), step.fn)
			if err != nil {
				t.Fatal(err)
			}
			ps[i] = p
		}
		return ps
	}
	ps := build()
	together, err := analysis.CompilePrograms(ps...)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range build() {
		alone, err := analysis.CompileProgram(p)
		if err != nil {
			t.Fatal(err)
		}
		if together[i] != alone {
			t.Errorf("%s: compiled with the others %+v, alone %+v", steps[i].name, together[i], alone)
		}
		p.Graph.Finalize()
		ps[i].Graph.Finalize()
	}
	embeddedStep, err := analysis.ContextProgram(embedded(), context.New(), "step", steps[0].shapes(), steps[0].fn)
	if err != nil {
		t.Fatal(err)
	}
	mixed := append(build(), embeddedStep)
	if _, err := analysis.CompilePrograms(mixed...); err == nil {
		t.Error("CompilePrograms returned statistics for a program on the embedded backend")
	}
	for _, p := range mixed {
		p.Graph.Finalize()
	}
}
