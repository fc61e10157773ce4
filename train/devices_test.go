package train_test

import (
	"math"
	"os"
	"testing"

	"github.com/gomlx/gomlx/backends"

	ograph "github.com/onegpu/onegpu/graph"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/train"
)

func xlaBackend(t *testing.T) backends.Backend {
	t.Helper()
	path := os.Getenv(ograph.EnvPlugin)
	if path == "" {
		t.Skipf("needs an XLA PJRT plugin: set $%s (pip install lammps-jax-pjrt-cpu)", ograph.EnvPlugin)
	}
	backend, err := ograph.NewBackend("xla:" + path)
	if err != nil {
		t.Fatal(err)
	}
	return backend
}

func losses(t *testing.T, backend backends.Backend, config train.Config, steps int) []float64 {
	t.Helper()
	tr, err := train.New(backend, config)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	data := train.NewSyntheticTokens(config.Batch, config.GPT.SeqLen, config.GPT.Vocab, 3)
	var out []float64
	for step := range steps {
		m, err := tr.Step(data.Batch(step))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m.Loss)
	}
	return out
}

func TestDevicesProto(t *testing.T) {
	backend := xlaBackend(t)
	defer backend.Finalize()
	config := tinyConfig(t)
	config.Policy, _ = mixed.ParsePolicy("float32")
	config.GPT.Dropout = 0
	want := losses(t, backend, config, 5)
	for _, shard := range []train.Shard{train.ShardNone, train.ShardOptimizer, train.ShardParams} {
		c := config
		c.Devices = train.Devices{Count: 4, Shard: shard}
		got := losses(t, backend, c, 5)
		for i := range want {
			rel := math.Abs(got[i]-want[i]) / math.Abs(want[i])
			t.Logf("%s step %d: %.7f vs %.7f rel %.2g", shard, i+1, got[i], want[i], rel)
		}
	}
}
