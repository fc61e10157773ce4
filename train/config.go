package train

import (
	"fmt"

	"strconv"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/remat"
)

// Config is one training setup: a model, the techniques applied to it, and the optimizer.
type Config struct {
	// Model is "gpt" or "mlp" (the tutorial's classifier) for New; NewFor takes a Model of your
	// own instead and ignores Model, GPT, Classifier and Remat.
	Model      string
	GPT        models.GPTConfig
	Classifier models.ClassifierConfig
	// Batch is the number of sequences (gpt) or examples (mlp) per optimizer step, split into
	// MicroBatches micro-batches whose gradients are accumulated in the step's graph.
	Batch, MicroBatches int
	// Policy is set on the context's root scope for the model's layers (mixed.SetPolicy); the
	// zero Policy means float32 throughout.
	Policy mixed.Policy
	// Remat says which of the GPT's sub-blocks are rematerialized; RematBlocks names the kinds of
	// block (remat.Block) of any model that are; RematPolicy says what either saves.
	Remat       remat.Spec
	RematBlocks []string
	RematPolicy remat.Policy
	// LossScale is "none", "dynamic" or "static=N" (see ParseLossScale).
	LossScale string
	Schedule  Schedule
	// Optimizer is "adam" (the default, also for "") or "adam8bit": Adam with block-wise 8-bit
	// moments (optim.Adam8bit), a quarter of the state; both with the tutorial's betas and epsilon.
	Optimizer string
	// Offload is "none" (the default, also for "") or "optimizer": the optimizer's state and its
	// update live in host memory, on the embedded backend, and the backend computes the loss and
	// the gradients only (ZeRO-Offload's split; see Trainer.OffloadStats). One device only.
	Offload string
	// Seed fixes the initial weights, the dropout masks and the data.
	Seed uint64
	// Devices runs the step on several devices of an XLA backend (see Devices); zero is one device.
	Devices Devices
}

// Validate returns an error naming the setting that cannot work and how to fix it.
func (c Config) Validate() error {
	if err := c.ValidateTraining(); err != nil {
		return err
	}
	switch c.Model {
	case "gpt":
		if err := c.GPT.Validate(); err != nil {
			return err
		}
	case "mlp":
		if err := c.Classifier.Validate(); err != nil {
			return err
		}
		if width := max(c.Classifier.Inputs, c.Classifier.Hidden, c.Classifier.Classes); float64(c.Batch)*float64(width) > models.MaxTensorElements {
			return fmt.Errorf("a batch of %d examples of width %d is more values than onegpu counts (2^46): choose a smaller batch", c.Batch, width)
		}
	default:
		return fmt.Errorf("unknown model %q: use gpt or mlp, or train a model of your own with train.NewFor", c.Model)
	}
	return nil
}

// ValidateTraining checks the settings that apply to any model (batch, micro-batches, remat
// blocks, loss scale, schedule): Validate without the tutorial's models.
func (c Config) ValidateTraining() error {
	if c.Batch < 1 || c.MicroBatches < 1 {
		return fmt.Errorf("batch %d and micro-batches %d must be at least 1", c.Batch, c.MicroBatches)
	}
	if c.Batch%c.MicroBatches != 0 {
		return fmt.Errorf("a batch of %d does not split into %d equal micro-batches: choose micro-batches that divide the batch", c.Batch, c.MicroBatches)
	}
	for _, name := range c.RematBlocks {
		if strings.TrimSpace(name) == "" {
			return fmt.Errorf("remat blocks %q: a block name is empty; use the names the model gives remat.Block", c.RematBlocks)
		}
	}
	if _, err := ParseLossScale(c.LossScale); err != nil {
		return err
	}
	if err := checkOptimizer(c.Optimizer); err != nil {
		return err
	}
	if err := c.checkOffload(); err != nil {
		return err
	}
	if err := c.Devices.validate(c.Batch, c.MicroBatches); err != nil {
		return err
	}
	return c.Schedule.Validate()
}

// ParseLossScale reads "none" (or ""), "dynamic" (jmp's defaults: 2^15, ×2 every 2000 finite
// steps) or "static=N".
func ParseLossScale(s string) (mixed.LossScale, error) {
	switch {
	case s == "" || s == "none":
		return nil, nil
	case s == "dynamic":
		return mixed.NewDynamicLossScale(), nil
	case strings.HasPrefix(s, "static="):
		v, err := strconv.ParseFloat(strings.TrimPrefix(s, "static="), 64)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("loss scale %q: static needs a positive number, e.g. static=1024", s)
		}
		return mixed.StaticLossScale(v), nil
	}
	return nil, fmt.Errorf("unknown loss scale %q: use none, dynamic or static=N", s)
}

// Values of Config.Offload.
const (
	OffloadNone      = "none"
	OffloadOptimizer = "optimizer"
)

// checkOffload refuses an unknown Config.Offload and the combinations the offloaded step does not
// support.
func (c Config) checkOffload() error {
	switch c.Offload {
	case "", OffloadNone:
		return nil
	case OffloadOptimizer:
		if p := c.Policy.Param; p != dtypes.InvalidDType && p != dtypes.Float32 && p != dtypes.Float64 {
			return fmt.Errorf("--offload optimizer with %s parameters: the device returns float32 gradients in the parameters' buffers; "+
				"keep the parameters in float32 (--policy params=float32,...)", p)
		}
		if c.Devices.Distributed() {
			return fmt.Errorf("--offload optimizer with --devices %d: the offloaded update feeds one device; use --devices 1, "+
				"or keep the state on the devices and split it with --shard optimizer", c.Devices.Count)
		}
		return nil
	}
	return fmt.Errorf("unknown --offload %q: use %s or %s", c.Offload, OffloadNone, OffloadOptimizer)
}
