package quant

import "testing"

// BenchmarkQuantize times the host's NF4 quantization (QLoRA's configuration) of a Llama-3.1-8B
// MLP matrix, [14336, 4096]: go test ./quant -run XXX -bench Quantize.
func BenchmarkQuantize(b *testing.B) {
	const rows, cols = 14336, 4096
	x := normalValues(1, rows*cols, 0.02)
	b.SetBytes(rows * cols * 4)
	for b.Loop() {
		if _, err := Quantize(QLoRA(), x, rows, cols); err != nil {
			b.Fatal(err)
		}
	}
}
