// Command quickstart is the README's library example: it trains the tutorial's tiny GPT on the
// shipped text with the tutorial's techniques (bfloat16 compute over float32 parameters, remat of
// MLP and attention, 4 micro-batches) and 8-bit Adam, and prints the loss before and after.
// main_test.go runs it and checks that the README shows its code (go test ./examples/quickstart).
//
//	go run ./examples/quickstart
package main

import (
	"fmt"
	"os"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/janpfeifer/must"

	"github.com/onegpu/onegpu/data"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/optim"
	"github.com/onegpu/onegpu/platform"
	"github.com/onegpu/onegpu/train"
)

func main() {
	h := run(60)
	fmt.Printf("loss %.2f -> %.2f in %d steps\n", h.Steps[0].Loss, h.Steps[len(h.Steps)-1].Loss, len(h.Steps))
}

// run trains the tiny GPT on the shipped text with the tutorial's techniques and 8-bit Adam.
func run(steps int) *train.History {
	backend := must.M1(platform.NewBackend("")) // embedded, or XLA when $ONEGPU_PJRT_PLUGIN names a plugin
	gpt := models.GPT{Config: models.Presets["tiny"]}
	trainer := must.M1(train.New(backend, train.Config{Model: gpt, Batch: 16, MicroBatches: 4, Seed: 42,
		Policy:    mixed.Policy{Param: dtypes.Float32, Compute: dtypes.BFloat16, Output: dtypes.Float32},
		Remat:     train.Remat{Kinds: []string{"mlp", "attn"}},
		Optimizer: optim.Adam8bit().Done(), Schedule: optim.Constant(3e-3)}))
	defer trainer.Close()
	text := must.M1(data.NewText(data.Corpus, 16, gpt.Config.SeqLen, 42))
	return must.M1(trainer.Run(text, train.RunOptions{Steps: steps, Progress: os.Stderr}))
}
