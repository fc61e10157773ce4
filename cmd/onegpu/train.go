package main

import (
	"fmt"
	"io"
	"os"

	"github.com/onegpu/onegpu/train"
)

func init() {
	register(command{
		name:    "train",
		summary: "train the tutorial's GPT or MLP with mixed precision, remat and micro-batches, showing the loss",
		run:     func(args []string) error { return runTrain(args, os.Stdout) },
	})
}

func runTrain(args []string, w io.Writer) error {
	fs := newFlagSet("train", "[--model gpt|mlp] [--preset P] [--policy S] [--remat SPEC] [--microbatches K] [--steps N] [--data text|synthetic] [--checkpoint DIR] [--plot FILE.png] [--json]")
	var s setup
	s.register(fs, "gpt", "tiny")
	steps := fs.Int("steps", 60, "train up to this global step (a resumed run continues from its checkpoint)")
	dataName := fs.String("data", "text", "gpt data: text (byte-level Genesis and Exodus, shipped with onegpu) or synthetic (the tutorial's fixed random batch)")
	checkpointDir := fs.String("checkpoint", "", "folder to resume from and save checkpoints to (default: no checkpoints)")
	logEvery := fs.Int("log-every", 0, "print a progress line every N steps, at least 1 (default: 20 lines per run)")
	plotFile := fs.String("plot", "", "write the loss curve to this PNG file (default: no plot)")
	asJSON := fs.Bool("json", false, "print the run's history as one JSON object instead of progress lines")
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if *steps < 1 {
		return fmt.Errorf("--steps %d: train at least one step", *steps)
	}
	set := given(fs)
	if err := atLeast(set, "log-every", *logEvery, 1); err != nil {
		return err
	}
	if s.model == "mlp" {
		if err := notApplicable(set, "the MLP trains on its classification batch; --data chooses the GPT's", "data"); err != nil {
			return err
		}
	}
	config, err := s.config()
	if err != nil {
		return err
	}
	data, err := trainingData(config, *dataName)
	if err != nil {
		return err
	}
	backend, spec, err := s.newBackend()
	if err != nil {
		return err
	}
	defer backend.Finalize()
	trainer, err := train.New(backend, config)
	if err != nil {
		return err
	}
	defer trainer.Close()
	var progress io.Writer = w
	if *asJSON {
		progress = nil
	} else {
		fmt.Fprintf(w, "%s\nbackend %s\n", describe(config), spec)
	}
	history, err := trainer.Run(data, train.RunOptions{Steps: *steps, Progress: progress, LogEvery: *logEvery,
		CheckpointDir: *checkpointDir, SaveEvery: max(1, *steps/4)})
	if err != nil {
		return err
	}
	if *plotFile != "" {
		if err := plotLoss(*plotFile, title(config), history); err != nil {
			return err
		}
	}
	if *asJSON {
		return writeJSON(w, struct {
			Config  string `json:"config"`
			Backend string `json:"backend"`
			*train.History
		}{describe(config), spec.String(), history})
	}
	history.WriteSummary(w, config.Model)
	if *plotFile != "" {
		fmt.Fprintf(w, "%-22s %s\n", "loss curve", *plotFile)
	}
	return nil
}

// trainingData returns the data a config trains on.
func trainingData(c train.Config, name string) (train.Data, error) {
	if c.Model == "mlp" {
		return train.NewClassifierBatch(c.Batch, c.Classifier.Inputs, c.Classifier.Classes, c.Seed)
	}
	switch name {
	case "text":
		if c.GPT.Vocab < 256 {
			return nil, fmt.Errorf("--data text needs a vocabulary of at least 256 bytes; the model has %d", c.GPT.Vocab)
		}
		return train.NewText(train.Corpus, c.Batch, c.GPT.SeqLen, c.Seed)
	case "synthetic":
		return train.NewSyntheticTokens(c.Batch, c.GPT.SeqLen, c.GPT.Vocab, c.Seed)
	}
	return nil, fmt.Errorf("unknown --data %q: use text or synthetic", name)
}
