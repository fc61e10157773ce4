package train

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// MarshalJSON writes the metrics with non-finite numbers as the strings "NaN", "+Inf" and "-Inf"
// (JSON has no such numbers, and a diverged run's history must not be lost to the encoder); finite
// numbers stay numbers.
func (m StepMetrics) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Step     int       `json:"step"`
		Loss     jsonFloat `json:"loss"`
		Accuracy jsonFloat `json:"accuracy"`
		Count    jsonFloat `json:"count"`
	}{m.Step, jsonFloat(m.Loss), jsonFloat(m.Accuracy), jsonFloat(m.Count)})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (m *StepMetrics) UnmarshalJSON(data []byte) error {
	var raw struct {
		Step                  int
		Loss, Accuracy, Count jsonFloat
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	*m = StepMetrics{Step: raw.Step, Loss: float64(raw.Loss), Accuracy: float64(raw.Accuracy), Count: float64(raw.Count)}
	return nil
}

// jsonFloat is a float64 that JSON-encodes NaN and ±Inf as strings.
type jsonFloat float64

func (f jsonFloat) MarshalJSON() ([]byte, error) {
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

func (f *jsonFloat) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err == nil {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || !(math.IsNaN(v) || math.IsInf(v, 0)) {
			return fmt.Errorf("metric %q: want a number, NaN, +Inf or -Inf", s)
		}
		*f = jsonFloat(v)
		return nil
	}
	var v float64
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	*f = jsonFloat(v)
	return nil
}
