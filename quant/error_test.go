package quant

import (
	"math"
	"testing"
)

// roundTripError returns the mean squared error and the mean absolute error of values against x.
func roundTripError(x []float32, values []float64) (mse, mae float64) {
	for i, v := range values {
		d := v - float64(x[i])
		mse += d * d
		mae += math.Abs(d)
	}
	return mse / float64(len(x)), mae / float64(len(x))
}

// TestNF4BeatsUniform4Bit checks QLoRA's claim on normally distributed weights: NF4's round trip
// is more accurate than a uniform 4-bit absmax code of the same blocks (levels k/7, k = -7..7,
// what "Int4" means in the paper), and double quantization of the scales costs almost nothing.
// The figures are logged (go test ./quant -run TestNF4BeatsUniform4Bit -v).
func TestNF4BeatsUniform4Bit(t *testing.T) {
	const n = 1 << 18
	x := normalValues(36, n, 0.02) // the scale of Llama's initialization
	plain, err := Quantize(Config{Format: NF4}, x, n)
	if err != nil {
		t.Fatal(err)
	}
	double, err := Quantize(QLoRA(), x, n)
	if err != nil {
		t.Fatal(err)
	}
	uniform := make([]float64, 15)
	for k := range uniform {
		uniform[k] = float64(k-7) / 7
	}
	ref := refQuantize(float64s(x), DefaultBlockSize, uniform, 0)
	int4MSE, int4MAE := roundTripError(x, ref.dequantize(uniform, ref.scales, DefaultBlockSize))
	nf4MSE, nf4MAE := roundTripError(x, float64s(plain.Dequantize()))
	dqMSE, dqMAE := roundTripError(x, float64s(double.Dequantize()))
	variance := 0.02 * 0.02
	t.Logf("N(0, 0.02²), %d values, blocks of 64: mean squared error / variance: uniform 4-bit absmax %.5f, NF4 %.5f (%.3fx), NF4 with double quantization %.5f; mean absolute error %.4g, %.4g, %.4g",
		n, int4MSE/variance, nf4MSE/variance, nf4MSE/int4MSE, dqMSE/variance, int4MAE, nf4MAE, dqMAE)
	if nf4MSE >= int4MSE || nf4MAE >= int4MAE {
		t.Errorf("NF4's round trip (mse %g, mae %g) is not more accurate than a uniform 4-bit code's (%g, %g)", nf4MSE, nf4MAE, int4MSE, int4MAE)
	}
	if dqMSE > 1.01*nf4MSE {
		t.Errorf("double quantization raised the error from %g to %g", nf4MSE, dqMSE)
	}
}
