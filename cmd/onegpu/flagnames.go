package main

import (
	"io"
	"strings"
)

// The library names the setting to change by its Go name (train.Config's fields, train.RunOptions');
// the CLI says which flag sets it. flagNames maps one to the other, longest names first so that
// "Config.Devices.Count" is not read as "Config.Devices".
var flagNames = strings.NewReplacer(
	"train.RunOptions.AllowOtherData", "--allow-other-data",
	"train.RunOptions.CheckpointDir", "--checkpoint",
	"train.RunOptions.Overwrite", "--overwrite",
	"train.RunOptions.Steps", "--steps",
	"RunOptions.AllowOtherData", "--allow-other-data",
	"RunOptions.CheckpointDir", "--checkpoint",
	"RunOptions.Overwrite", "--overwrite",
	"RunOptions.Steps", "--steps",
	"RunOptions.EvalEvery", "--eval-every",
	"TextFormat.Template", "--template",
	"TextFormat.Separator", "--separator",
	"TokenizeOptions.Tokenizer", "--tokenizer",
	"Trainer.SetWeights", "--init-hf",
	"Config.LoRA.Quantize", "--quantize-base",
	"Config.BaseDType", "--base-dtype",
	"Config.LoRA", "--lora",
	"Config.Devices.Count", "--devices",
	"Config.Devices.Shard", "--shard",
	"Config.DeviceBudget", "--budget",
	"Config.SerialHostUpdate", "--host-update",
	"Config.MicroBatches", "--microbatches",
	"Config.CrossEntropy", "--cross-entropy",
	"Config.Attention", "--attention",
	"Config.LossScale", "--loss-scale",
	"Config.Optimizer", "--optimizer",
	"Config.Schedule", "--lr",
	"Config.ClipNorm", "--clip-norm",
	"Config.Offload", "--offload",
	"Config.Policy", "--policy",
	"Config.Remat", "--remat",
	"Config.Batch", "--batch",
	"Config.Seed", "--seed",
)

// inFlags returns err with the library's setting names replaced by the flags that set them
// (flagNames); errors.As and errors.Is still see err's chain. A command's run function defers it
// on its returned error: defer inFlags(&err).
func inFlags(err *error) {
	if *err == nil {
		return
	}
	if msg := (*err).Error(); flagNames.Replace(msg) != msg {
		*err = &flagError{msg: flagNames.Replace(msg), err: *err}
	}
}

// flagError is an error whose message names flags where the library named settings.
type flagError struct {
	msg string
	err error
}

func (e *flagError) Error() string { return e.msg }
func (e *flagError) Unwrap() error { return e.err }

// flagWriter passes what the library writes for people (progress lines) to w with its setting
// names replaced by flags, as inFlags does for errors. The library writes whole lines.
type flagWriter struct{ w io.Writer }

func (f flagWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(f.w, flagNames.Replace(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}
