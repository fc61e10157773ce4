package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/onegpu/onegpu/train"
)

var (
	lossCurvePreset = flag.String("loss-curve-preset", "tiny", "BenchmarkAdam8bitLossCurves: the GPT preset")
	lossCurveSteps  = flag.Int("loss-curve-steps", 300, "BenchmarkAdam8bitLossCurves: steps of each run")
	lossCurvePlot   = flag.String("loss-curve-plot", filepath.Join(os.TempDir(), "adam8bit_loss.png"), "BenchmarkAdam8bitLossCurves: where to write the plot")
)

// BenchmarkAdam8bitLossCurves trains a GPT preset on the text corpus with Adam and with 8-bit
// Adam (train's defaults otherwise: same seed, dropout and data), reports the final losses, their
// ratio and the ratio at step 150 (what `onegpu train --steps 150` ends with: the data and the
// schedule do not depend on the run's length), and plots both curves:
//
//	go test ./cmd/onegpu -run '^$' -bench Adam8bitLossCurves -benchtime 1x -loss-curve-steps 300
func BenchmarkAdam8bitLossCurves(b *testing.B) {
	names := []string{"adam", "adam8bit"}
	for range b.N {
		var histories []*train.History
		for _, name := range names {
			var s setup
			fs := flag.NewFlagSet("bench", flag.ContinueOnError)
			s.register(fs, "gpt", *lossCurvePreset)
			if err := fs.Parse([]string{"--optimizer", name}); err != nil {
				b.Fatal(err)
			}
			config, err := s.config()
			if err != nil {
				b.Fatal(err)
			}
			backend, _, err := s.newBackend() // the embedded backend, or $ONEGPU_PJRT_PLUGIN's XLA
			if err != nil {
				b.Fatal(err)
			}
			batches, err := batchData(config, "text")
			if err != nil {
				b.Fatal(err)
			}
			trainer, err := train.New(backend, config)
			if err != nil {
				b.Fatal(err)
			}
			h, err := trainer.Run(batches, train.RunOptions{Steps: *lossCurveSteps})
			trainer.Close()
			backend.Finalize()
			if err != nil {
				b.Fatal(err)
			}
			histories = append(histories, h)
			b.Logf("%s: loss %.4f -> %.4f in %d steps, %.2f s per step", name, h.Steps[0].Loss, h.Steps[len(h.Steps)-1].Loss, len(h.Steps), h.StepSeconds)
		}
		at := func(h *train.History, step int) float64 { return h.Steps[min(step, len(h.Steps))-1].Loss }
		adam, eight := histories[0], histories[1]
		b.ReportMetric(at(adam, *lossCurveSteps), "adam-final-loss")
		b.ReportMetric(at(eight, *lossCurveSteps), "adam8bit-final-loss")
		b.ReportMetric(at(eight, *lossCurveSteps)/at(adam, *lossCurveSteps), "final-loss-ratio")
		if *lossCurveSteps >= 150 {
			b.ReportMetric(at(adam, 150), "adam-step150-loss")
			b.ReportMetric(at(eight, 150), "adam8bit-step150-loss")
			b.ReportMetric(at(eight, 150)/at(adam, 150), "step150-loss-ratio")
		}
		title := fmt.Sprintf("GPT %s on the text corpus, %d steps: Adam vs 8-bit Adam", *lossCurvePreset, *lossCurveSteps)
		if err := plotLosses(*lossCurvePlot, title, names, histories); err != nil {
			b.Fatal(err)
		}
		b.Logf("loss curves in %s", *lossCurvePlot)
	}
}
