package main

import (
	"fmt"
	"slices"
	"strings"
)

// modelConfigs returns what `compare --model M [--preset P]` runs: the configurations of the cpu
// and llama sets that train model M (their techniques: float32, bfloat16 compute with remat and
// micro-batches, ...), at preset P when given, else at each line's preset.
func modelConfigs(model, preset string) ([]string, error) {
	var out, models []string
	for _, set := range []string{"cpu", "llama"} {
		for _, line := range compareSets[set] {
			fields := strings.Fields(line)
			var lineModel string
			hasPreset := false
			for i := 0; i+1 < len(fields); i++ {
				switch fields[i] {
				case "--model":
					lineModel = fields[i+1]
				case "--preset":
					hasPreset = true
					if preset != "" {
						fields[i+1] = preset
					}
				}
			}
			if !slices.Contains(models, lineModel) {
				models = append(models, lineModel)
			}
			if lineModel != model {
				continue
			}
			if preset != "" && !hasPreset {
				return nil, fmt.Errorf("--preset %s does not apply: the %s has one size, without presets", preset, model)
			}
			out = append(out, strings.Join(fields, " "))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("unknown --model %q: compare runs %s (or give --config with train's flags)", model, strings.Join(models, ", "))
	}
	return out, nil
}
