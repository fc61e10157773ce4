package train_test

import (
	"fmt"

	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/optim"
	"github.com/onegpu/onegpu/train"
)

// A run is one typed value: the model, the batch and its micro-batches, the policy, what is
// rematerialized, the optimizer, the schedule. Validate names what cannot work before anything is
// built.
func ExampleConfig() {
	gpt := models.GPT{Config: models.Presets["tiny"]}
	config := train.Config{Model: gpt, Batch: 16, MicroBatches: 4, Remat: train.Remat{Kinds: []string{"mlp", "attn"}},
		Optimizer: optim.AdamW().WeightDecay(0.01).Done(), ClipNorm: 1, Schedule: optim.WarmupCosine(0, 3e-3, 10, 100, 3e-4)}
	fmt.Println(config.Validate())
	config.Remat.Kinds = []string{"mlp", "atn"}
	fmt.Println(config.Validate())
	// Output:
	// <nil>
	// remat mlp,atn: the model has no block of kind "atn"; its kinds are block,mlp,attn
}
