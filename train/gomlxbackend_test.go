package train_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/backends"

	"github.com/onegpu/onegpu/data"
	"github.com/onegpu/onegpu/train"
)

// gomlxBackendChildEnv makes TestTrainOnGoMLXBackend run its check in this process: a child
// process that has created no backend through onegpu (platform.NewBackend), as a program that
// creates its backend with GoMLX does.
const gomlxBackendChildEnv = "ONEGPU_GOMLX_BACKEND_CHILD"

// TestTrainOnGoMLXBackend: a trainer on a backend GoMLX created (backends.NewWithConfig, not
// onegpu's platform.NewBackend) runs a step of the tiny GPT: onegpu's gradient rules are installed
// when package vjp is imported, not when onegpu creates a backend. Before, the GPT's position slice
// took GoMLX's Slice gradient, which needs Pad, and step 1 failed ("Pad not implemented"). The
// check runs in a child process, where no test has created a backend through onegpu first.
func TestTrainOnGoMLXBackend(t *testing.T) {
	if os.Getenv(gomlxBackendChildEnv) == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestTrainOnGoMLXBackend$", "-test.v")
		cmd.Env = append(os.Environ(), gomlxBackendChildEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestTrainOnGoMLXBackend") {
			t.Fatalf("the child training on a GoMLX-created backend: %v\n%s", err, out)
		}
		return
	}
	backend, err := backends.NewWithConfig("go:ops_sequential")
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Finalize()
	config := tinyConfig(t)
	tr, err := train.New(backend, config)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	batches, err := data.NewText(data.Corpus, config.Batch, gptOf(config).SeqLen, 1)
	if err != nil {
		t.Fatal(err)
	}
	m, err := tr.Step(batches.Batch(0))
	if err != nil {
		t.Fatalf("step 1 on a GoMLX-created backend: %v", err)
	}
	t.Logf("step 1: loss %.4f", m.Loss)
}
