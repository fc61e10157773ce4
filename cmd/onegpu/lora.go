package main

import (
	"flag"
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/quant"
	"github.com/onegpu/onegpu/train"
)

// loraFlags are the flags of a run with adapters on a frozen base (train.Config.LoRA,
// BaseDType), shared by train, memory and plan.
type loraFlags struct {
	lora, quantizeBase, baseDType string
	// adapter is --init-adapter's LoRA, the run's when --lora is not given.
	adapter layers.LoRA
}

func (l *loraFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&l.lora, "lora", "", "train low-rank adapters on a frozen base instead of the model (PEFT's LoRA):\n"+
		"rank=R[,alpha=A][,targets=q,k,v,o,gate,up,down][,dropout=P][,rslora] (defaults: alpha 8, targets q,v, dropout 0) (default: train the model)")
	fs.StringVar(&l.quantizeBase, "quantize-base", "", "with --lora: keep the targeted base weights in 4-bit NF4 (QLoRA: blocks of 64, scales double-quantized; 0.516 bytes a parameter)\n"+
		"or int8 (blocks of 64, float32 scales; 1.06 bytes a parameter), quantized once at load (default: the base in --base-dtype)")
	fs.StringVar(&l.baseDType, "base-dtype", "", "with --lora: dtype of the frozen base's weights, float32 or bfloat16 (default: the policy's parameter dtype)")
}

// apply reads the flags into c, checked with the flags' names.
func (l *loraFlags) apply(c *train.Config, set map[string]bool) error {
	lora := l.adapter
	if set["lora"] {
		var err error
		if lora, err = layers.ParseLoRA(l.lora); err != nil {
			return fmt.Errorf("--lora: %w", err)
		}
	}
	if !lora.Active() {
		for _, name := range []string{"quantize-base", "base-dtype"} {
			if set[name] {
				return fmt.Errorf("--%s applies to a run with adapters on a frozen base: give --lora too", name)
			}
		}
		return nil
	}
	if set["quantize-base"] {
		format, err := quant.ParseFormat(l.quantizeBase)
		if err != nil {
			return fmt.Errorf("--quantize-base: %w", err)
		}
		lora.Quantize = quant.Default(format)
	}
	c.LoRA = lora
	if set["base-dtype"] {
		dtype, err := mixed.ParseDType(l.baseDType)
		if err != nil || (dtype != dtypes.Float32 && dtype != dtypes.BFloat16) {
			return fmt.Errorf("--base-dtype %q: want float32 or bfloat16", l.baseDType)
		}
		c.BaseDType = dtype
	}
	return nil
}
