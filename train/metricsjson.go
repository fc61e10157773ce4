package train

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// stepMetricsJSON is StepMetrics as JSON: its fields (stepMetricsFields has them without the
// methods below), the floats shadowed by JSONFloats.
type stepMetricsJSON struct {
	stepMetricsFields
	Loss     JSONFloat            `json:"loss"`
	Accuracy JSONFloat            `json:"accuracy"`
	Count    JSONFloat            `json:"count"`
	Metrics  map[string]JSONFloat `json:"metrics,omitempty"`
	MeanLoss JSONFloat            `json:"mean_loss"`
}

type stepMetricsFields StepMetrics

// MarshalJSON writes the metrics with non-finite numbers as the strings "NaN", "+Inf" and "-Inf"
// (JSON has no such numbers, and a diverged run's history must not be lost to the encoder); finite
// numbers stay numbers.
func (m StepMetrics) MarshalJSON() ([]byte, error) {
	return json.Marshal(stepMetricsJSON{stepMetricsFields(m), JSONFloat(m.Loss), JSONFloat(m.Accuracy), JSONFloat(m.Count), jsonFloats(m.Metrics),
		JSONFloat(m.MeanLoss)})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (m *StepMetrics) UnmarshalJSON(data []byte) error {
	var raw stepMetricsJSON
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	*m = StepMetrics(raw.stepMetricsFields)
	m.Loss, m.Accuracy, m.Count, m.MeanLoss = float64(raw.Loss), float64(raw.Accuracy), float64(raw.Count), float64(raw.MeanLoss)
	m.Metrics = floats(raw.Metrics)
	return nil
}

// evalPointJSON is EvalPoint as JSON, its floats shadowed by JSONFloats.
type evalPointJSON struct {
	evalPointFields
	Loss    JSONFloat            `json:"loss"`
	Metrics map[string]JSONFloat `json:"metrics,omitempty"`
}

type evalPointFields EvalPoint

// MarshalJSON writes the point with non-finite numbers as strings, as StepMetrics does.
func (p EvalPoint) MarshalJSON() ([]byte, error) {
	return json.Marshal(evalPointJSON{evalPointFields(p), JSONFloat(p.Loss), jsonFloats(p.Metrics)})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (p *EvalPoint) UnmarshalJSON(data []byte) error {
	var raw evalPointJSON
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	*p = EvalPoint(raw.evalPointFields)
	p.Loss, p.Metrics = float64(raw.Loss), floats(raw.Metrics)
	return nil
}

// jsonFloats is metrics as JSONFloats.
func jsonFloats(metrics map[string]float64) map[string]JSONFloat {
	out := make(map[string]JSONFloat, len(metrics))
	for k, v := range metrics {
		out[k] = JSONFloat(v)
	}
	return out
}

// floats is jsonFloats' inverse (nil stays nil).
func floats(metrics map[string]JSONFloat) map[string]float64 {
	if metrics == nil {
		return nil
	}
	out := make(map[string]float64, len(metrics))
	for k, v := range metrics {
		out[k] = float64(v)
	}
	return out
}

// JSONFloat is a float64 that JSON-encodes NaN and ±Inf as the strings "NaN", "+Inf" and "-Inf"
// (JSON has no such numbers; encoding/json fails on them), and reads them back: the history's
// metrics and whatever else reports a loss (onegpu eval --json) write a diverged value so.
type JSONFloat float64

// MarshalJSON writes f as a number, or "NaN", "+Inf" or "-Inf".
func (f JSONFloat) MarshalJSON() ([]byte, error) {
	v := float64(f)
	switch {
	case math.IsNaN(v):
		return []byte(`"NaN"`), nil
	case math.IsInf(v, 1):
		return []byte(`"+Inf"`), nil
	case math.IsInf(v, -1):
		return []byte(`"-Inf"`), nil
	}
	return json.Marshal(v)
}

// UnmarshalJSON reads a number, or "NaN", "+Inf" or "-Inf".
func (f *JSONFloat) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err == nil {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || !(math.IsNaN(v) || math.IsInf(v, 0)) {
			return fmt.Errorf("metric %q: want a number, NaN, +Inf or -Inf", s)
		}
		*f = JSONFloat(v)
		return nil
	}
	var v float64
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	*f = JSONFloat(v)
	return nil
}

// UnmarshalJSON reads a History as MarshalJSON writes it, its executor's statistics (Offload)
// into the type of its mode (Mode, Mode.Stats).
func (h *History) UnmarshalJSON(data []byte) error {
	type fields History // History's fields without its methods
	var raw struct {
		fields
		Offload json.RawMessage `json:"offload,omitempty"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	*h = History(raw.fields)
	if len(raw.Offload) == 0 || string(raw.Offload) == "null" {
		return nil
	}
	m, err := modeOf(Offload(h.Mode))
	if err != nil || m.Stats == nil {
		return fmt.Errorf("a history's offload statistics of mode %q: not a mode of this program that reports statistics", h.Mode)
	}
	h.Offload = m.Stats()
	return json.Unmarshal(raw.Offload, h.Offload)
}
