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
// the requested config before anything is built, so a checkpoint is never loaded into a model it
// does not fit, nor continued under settings that change what its numbers mean.
//
// Settings that must match on resume: the model and its sizes, the vocabulary, the precision
// policy, the optimizer and loss scale, the batch size, the seed (it chooses the data and the
// dropout masks) and the schedule's shape. Settings that may change on resume, because they change
// how a step is computed or how long the run is, not what the weights mean: the number of steps,
// the micro-batches, the learning rate's initial and peak values, remat and its policy, the backend. The onegpu version
// is recorded for the record only.
type WrittenBy struct {
	Onegpu     string `json:"onegpu"`
	Model      string `json:"model"` // e.g. "GPT small (4 layers × 256, 4 heads of 64, sequence 128, MLP ×4)"
	Vocabulary int    `json:"vocabulary"`
	Policy     string `json:"policy"`
	Optimizer  string `json:"optimizer"`
	Batch      int    `json:"batch"`
	Seed       uint64 `json:"seed"`
	Schedule   string `json:"schedule"` // without the initial and peak rates, which may change
	Dropout    string `json:"dropout"`
	// May change on resume; recorded to say what the checkpoint was trained with.
	MicroBatches int     `json:"microbatches"`
	PeakLR       float64 `json:"peak_lr"`
	Remat        string  `json:"remat"`
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
	add("vocabulary", w.Vocabulary, asked.Vocabulary)
	add("policy", w.Policy, asked.Policy)
	add("optimizer", w.Optimizer, asked.Optimizer)
	add("batch", w.Batch, asked.Batch)
	add("seed", w.Seed, asked.Seed)
	add("schedule", w.Schedule, asked.Schedule)
	add("dropout", w.Dropout, asked.Dropout)
	return diffs
}

// ConfigMismatchError is returned when a checkpoint folder holds a run of another config.
type ConfigMismatchError struct {
	Dir         string
	Differences []string
}

func (e *ConfigMismatchError) Error() string {
	return fmt.Sprintf("checkpoint folder %s holds another run; nothing was loaded or deleted:\n  %s\n"+
		"use another --checkpoint folder, or the settings it was written with (steps, micro-batches, --lr, remat and backend may change on resume)",
		e.Dir, strings.Join(e.Differences, "\n  "))
}
