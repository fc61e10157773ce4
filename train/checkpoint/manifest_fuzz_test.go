package checkpoint

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// validManifest is a manifest as onegpu writes one, for the fuzzer's seeds.
func validManifest(t testing.TB) []byte {
	m := manifest{Format: manifestFormat, Step: 3, Saved: time.Date(2026, 12, 4, 13, 0, 0, 0, time.UTC),
		WrittenBy: WrittenBy{Onegpu: "dev", Model: "tutorial MLP", ModelType: "models.Classifier", ModelConfig: json.RawMessage(`{"Hidden":256}`),
			Policy: "params=float32,compute=float32,output=float32", Optimizer: "adam", Batch: 64, Seed: 42, Schedule: "constant",
			Data: "tutorial batch", MicroBatches: 1, LearningRate: "constant(0.001)", Remat: "none"},
		JSONSHA: strings.Repeat("ab", 32), JSONBytes: 17376, BinSHA: strings.Repeat("0f", 32), BinBytes: 1646644}
	raw, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// FuzzParseManifest: a manifest is a file in the user's folder, so parseManifest reads any bytes
// without panicking; every error names the file ("manifest PATH: ..."), and what it accepts holds
// the values onegpu relies on (its format, a step and sizes of at least 0, two SHA-256s) and
// reads back the same when written again.
func FuzzParseManifest(f *testing.F) {
	valid := validManifest(f)
	f.Add(valid)
	for _, damage := range []struct{ from, to string }{
		{`"step": 3`, `"step": "three"`}, {`"step": 3`, `"step": -1`}, {`"step": 3`, `"step": 1e400`},
		{`"batch": 64`, `"batch": [64]`}, {`"seed": 42`, `"seed": -42`}, {`"format": 1`, `"format": 2`},
		{`"bin_bytes": 1646644`, `"bin_bytes": -1`}, {`"json_sha256": "abab`, `"json_sha256": "zz`},
		{`"written_by": {`, `"written_by": [{`}, {`"model_config": {`, `"model_config": {"x":`},
		{`"saved": "2026`, `"saved": "year 2026`}, {`{`, `[`}, {`"format": 1,`, ``},
	} {
		f.Add(bytes.Replace(valid, []byte(damage.from), []byte(damage.to), 1))
	}
	f.Add([]byte(nil))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"format":1,"step":0,"written_by":null,"json_sha256":"","bin_sha256":"","bin_bytes":0}`))
	const path = "ck/x.onegpu"
	f.Fuzz(func(t *testing.T, raw []byte) {
		m, err := parseManifest(path, raw)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "manifest "+path+": ") {
				t.Fatalf("the error does not name the file: %v", err)
			}
			return
		}
		if m.Format != manifestFormat || m.Step < 0 || m.BinBytes < 0 || m.JSONBytes < 0 || len(m.JSONSHA) != 64 || len(m.BinSHA) != 64 {
			t.Fatalf("accepted %+v from %q", m, raw)
		}
		again, err := json.Marshal(m)
		if err != nil {
			t.Fatalf("accepted %q, which does not write back: %v", raw, err)
		}
		m2, err := parseManifest(path, again)
		if err != nil {
			t.Fatalf("accepted %q; written back as %s it is refused: %v", raw, again, err)
		}
		if third, _ := json.Marshal(m2); !bytes.Equal(third, again) {
			t.Fatalf("written back, read and written again differs:\n%s\n%s", again, third)
		}
	})
}
