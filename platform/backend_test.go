package platform_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/onegpu/onegpu/platform"
)

func TestResolveBackend(t *testing.T) {
	dir := t.TempDir()
	textFile := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(textFile, []byte("not a plugin"), 0o644); err != nil {
		t.Fatal(err)
	}
	loop := filepath.Join(dir, "loop.so") // a symbolic link to itself
	if err := os.Symlink("loop.so", loop); err != nil {
		t.Fatal(err)
	}
	fakeELF := filepath.Join(dir, "plugin.so")
	if err := os.WriteFile(fakeELF, []byte("\x7fELF and more"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		spec, env, plugin string
		want              string // the resolved spec, or "" when an error is expected
		errHas            []string
	}{
		{spec: "", want: "go:ops_sequential"},
		{spec: "go", want: "go:ops_sequential"},
		{spec: "go:dotgeneral_large", want: "go:ops_sequential,dotgeneral_large"},
		{spec: "go:parallelism=8", want: "go:parallelism=8"},
		{spec: "go:ops_parallel", want: "go:ops_parallel"},
		{spec: "", env: "go:parallelism=16", want: "go:parallelism=16"},
		{spec: "", plugin: fakeELF, want: "xla:" + fakeELF},
		{spec: "", env: "go", plugin: fakeELF, want: "go:ops_sequential"},
		{spec: "xla:" + fakeELF, want: "xla:" + fakeELF},
		{spec: "go:parallelism=x", errHas: []string{"parallelism=x", "positive number"}},
		{spec: "go:ops_sequential,ops_parallel", errHas: []string{"both sequential and parallel"}},
		{spec: "go:fast", errHas: []string{`"fast"`, "ops_sequential"}},
		{spec: "tpu", errHas: []string{`"tpu"`, "xla:/abs/path"}},
		{spec: "xla", errHas: []string{"no PJRT plugin named", "lammps-jax-pjrt-cpu"}},
		{spec: "xla:cuda", errHas: []string{`"cuda" is not an absolute path`}},
		{spec: "xla:/nonexistent/pjrt_c_api_cpu_plugin.so", errHas: []string{"not found", "/nonexistent/pjrt_c_api_cpu_plugin.so"}},
		{spec: "xla:" + dir, errHas: []string{"not a regular file"}},
		{spec: "xla:" + loop, errHas: []string{loop + `" cannot be read (too many levels of symbolic links)`}},
		{spec: "xla:" + textFile, errHas: []string{"not a shared library"}},
		{spec: "", env: "xla:relative.so", errHas: []string{"$GOMLX_BACKEND", "not an absolute path"}},
	} {
		t.Run(tc.spec+"|"+tc.env+"|"+filepath.Base(tc.plugin), func(t *testing.T) {
			t.Setenv(platform.EnvBackend, tc.env)
			t.Setenv(platform.EnvPlugin, tc.plugin)
			got, err := platform.ResolveBackend(tc.spec)
			if tc.want != "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if got.String() != tc.want {
					t.Fatalf("got %q, want %q", got, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("got %q, want an error", got)
			}
			for _, s := range tc.errHas {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
}

func TestNewBackendErrorsNotPanics(t *testing.T) {
	dir := t.TempDir()
	fakeELF := filepath.Join(dir, "plugin.so")
	if err := os.WriteFile(fakeELF, []byte("\x7fELF but truncated"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, spec := range []string{"xla:" + fakeELF, "nonsense", "xla:/missing.so"} {
		b, err := platform.NewBackend(spec)
		if err == nil {
			b.Finalize()
			t.Errorf("NewBackend(%q) succeeded, want an error", spec)
			continue
		}
		t.Logf("NewBackend(%q): %v", spec, err)
	}
}

// TestFloat16RefusedWhileBuilding: the embedded backend cannot compute float16; asking for it must
// fail while the graph is built, with a message naming bfloat16, instead of killing the process
// when the op runs.
func TestFloat16RefusedWhileBuilding(t *testing.T) {
	for _, spec := range []string{"go", "go:parallelism=8"} {
		b, err := platform.NewBackend(spec)
		if err != nil {
			t.Fatal(err)
		}
		for name, fn := range map[string]func(g *graph.Graph) *graph.Node{
			"ConvertDType": func(g *graph.Graph) *graph.Node {
				return graph.ConvertDType(graph.Ones(g, shapes.Make(dtypes.Float32, 2)), dtypes.Float16)
			},
			"Constant": func(g *graph.Graph) *graph.Node { return graph.Ones(g, shapes.Make(dtypes.Float16, 2)) },
		} {
			_, err := graph.ExecOnce(b, fn)
			if err == nil || !strings.Contains(err.Error(), "bfloat16") || !strings.Contains(err.Error(), "float16") {
				t.Errorf("%s %s: got error %v, want one that refuses float16 and suggests bfloat16", spec, name, err)
			}
		}
		// bfloat16 still works.
		out, err := graph.ExecOnce(b, func(g *graph.Graph) *graph.Node {
			return graph.ReduceAllSum(graph.ConvertDType(graph.Ones(g, shapes.Make(dtypes.BFloat16, 8)), dtypes.Float32))
		})
		if err != nil || out.Value().(float32) != 8 {
			t.Errorf("%s: bfloat16 graph: got %v, %v; want 8", spec, out, err)
		}
		b.Finalize()
	}
}
