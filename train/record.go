package train

import (
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/onegpu/onegpu/data"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/train/checkpoint"
)

// OpenCheckpoints opens the checkpoint folder dir for a run of config (checkpoint.Open with
// Record(config)): see checkpoint.OpenWith for what it checks and refuses.
func OpenCheckpoints(dir string, config Config, keep int) (*checkpoint.Folder, error) {
	return checkpoint.Open(dir, Record(config), keep)
}

// OpenCheckpointsWith is OpenCheckpoints with all of checkpoint.Options (Overwrite among them).
func OpenCheckpointsWith(dir string, config Config, opts checkpoint.Options) (*checkpoint.Folder, error) {
	return checkpoint.OpenWith(dir, Record(config), opts)
}

// Record returns what a checkpoint written by a trainer with config c records.
func Record(c Config) checkpoint.WrittenBy {
	optimizer := fmt.Sprintf("%s, loss scale %s", c.optimizer(), mixed.DescribeLossScale(c.LossScale))
	if c.ClipNorm > 0 {
		optimizer += fmt.Sprintf(", clip by global norm %g", c.ClipNorm)
	}
	r := checkpoint.WrittenBy{
		Onegpu: Version(), Model: describeModel(c.Model), Policy: c.policy().String(), Optimizer: optimizer,
		Batch: c.Batch, Seed: c.Seed, MicroBatches: c.microBatches(), Remat: c.Remat.String(), Offload: c.Offload.String(),
		Attention: c.Attention.String(), CrossEntropy: c.CrossEntropy.String(), Adapters: c.DescribeAdapters(),
	}
	r.ModelType, r.ModelConfig = modelRecord(c.Model)
	if c.Schedule != nil {
		r.LearningRate = c.Schedule.String()
		r.Schedule, _, _ = strings.Cut(r.LearningRate, "(")
	}
	if !c.Remat.None() && !strings.Contains(r.Remat, "(") {
		r.Remat += " (" + c.Remat.Policy.String() + ")"
	}
	return r
}

// DataRecord is what a checkpoint records of the data d a run trains on, and what a resumed run
// compares (checkpoint.Folder.CheckData): d's Record method when it has one (data.Text: the
// text's size and SHA-256; data.SyntheticTokens and data.ClassifierBatch: their generator's
// parameters), else its Describe. It asks d for no batch. Data of your own should have a Record
// that changes whenever its batches would (a content hash of its files, its parameters); a type
// that wraps another data.Data should forward it (Record() string { return
// train.DataRecord(inner) }), so that wrapped and unwrapped runs record the same data.
func DataRecord(d data.Data) string {
	if r, ok := d.(interface{ Record() string }); ok {
		return r.Record()
	}
	return d.Describe()
}

// Version is the onegpu module's version and VCS revision as the Go toolchain recorded them
// ("(devel)" for a build from a work tree).
func Version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := info.Main.Version
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v += " " + s.Value[:12]
		}
	}
	return v
}
