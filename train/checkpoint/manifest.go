package checkpoint

import (
	"fmt"
	"strings"
	"time"
)

// manifest is the <name>.onegpu file of a checkpoint.
type manifest struct {
	Format    int       `json:"format"`
	Step      int       `json:"step"`
	Saved     time.Time `json:"saved"`
	WrittenBy WrittenBy `json:"written_by"`
	JSONSHA   string    `json:"json_sha256"`
	BinSHA    string    `json:"bin_sha256"`
	BinBytes  int64     `json:"bin_bytes"`
}

// WrittenBy is what a checkpoint records about the run that wrote it. Resuming compares it with
// the requested run before anything is built, so a checkpoint is never loaded into a model it
// does not fit, nor continued under settings that change what its numbers mean.
//
// Settings that must match on resume: the model and its sizes (its vocabulary and dropout among
// them), the precision policy, the optimizer with its hyperparameters, loss scale and clipping,
// the batch size, the seed (it chooses the data and the dropout masks) and the schedule's kind.
// Settings that may change on resume, because they change how a step is computed or how long the
// run is, not what the weights mean: the number of steps, the micro-batches, the schedule's rates
// and steps, remat and its policy, plain or chunked attention and cross-entropy, the offload, the
// devices and the backend. The sequence length is part of the model's description where the model
// has learned positions (the GPT: a resume at another length is refused); a model with rotary
// positions leaves it out of its description, and it may change. The onegpu version is recorded
// for the record only.
type WrittenBy struct {
	Onegpu string `json:"onegpu"`
	// Model describes the model and its sizes, e.g. "GPT small (4 layers × 256, 4 heads of 64,
	// sequence 128, MLP ×4, vocabulary 256, dropout 0.1)".
	Model  string `json:"model"`
	Policy string `json:"policy"`
	// Optimizer is the optimizer with its hyperparameters, then the loss scale and the clipping,
	// e.g. "adam(b1=0.9, b2=0.999, eps=1e-08), loss scale none".
	Optimizer string `json:"optimizer"`
	Batch     int    `json:"batch"`
	Seed      uint64 `json:"seed"`
	// Schedule is the schedule's kind, e.g. "warmup_exponential_decay": its rates may change.
	Schedule string `json:"schedule"`
	// May change on resume; recorded to say what the checkpoint was trained with.
	MicroBatches int    `json:"microbatches"`
	LearningRate string `json:"learning_rate"` // the schedule with its parameters
	Remat        string `json:"remat"`
	Offload      string `json:"offload,omitempty"`
	// Attention and CrossEntropy are layers.Attention's and layers.CrossEntropy's forms ("plain",
	// "chunked=1024"); empty in checkpoints written before they existed.
	Attention    string `json:"attention,omitempty"`
	CrossEntropy string `json:"cross_entropy,omitempty"`
}

// Differences lists each setting that must match on resume but does not, as "setting: this
// checkpoint was written by X; you asked for Y". Settings that may change are not listed.
func (w WrittenBy) Differences(asked WrittenBy) []string {
	var diffs []string
	add := func(name string, written, wanted any) {
		if fmt.Sprint(written) != fmt.Sprint(wanted) {
			diffs = append(diffs, fmt.Sprintf("%s: this checkpoint was written by %v; you asked for %v", name, written, wanted))
		}
	}
	add("model", w.Model, asked.Model)
	add("policy", w.Policy, asked.Policy)
	add("optimizer", w.Optimizer, asked.Optimizer)
	add("batch", w.Batch, asked.Batch)
	add("seed", w.Seed, asked.Seed)
	add("schedule", w.Schedule, asked.Schedule)
	return diffs
}

// ConfigMismatchError is returned when a checkpoint folder holds a run of another config.
type ConfigMismatchError struct {
	Dir         string
	Differences []string
}

func (e *ConfigMismatchError) Error() string {
	return fmt.Sprintf("checkpoint folder %s holds another run; nothing was loaded or deleted:\n  %s\n"+
		"use another --checkpoint folder, or the settings it was written with (steps, micro-batches, --lr, remat, attention, cross-entropy, offload, devices and backend may change on resume)",
		e.Dir, strings.Join(e.Differences, "\n  "))
}
