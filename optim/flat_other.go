//go:build !amd64 || purego

package optim

// No vector kernels here: the flat loops run as Go.
const hasAVX2 = false

func adamAVX2(p, grad, m, s *float32, n int, k *adamVector) {
	panic("optim: no AVX2 kernel on this platform")
}

func bfloat16AVX2(dst *uint16, src *float32, n int) { panic("optim: no AVX2 kernel on this platform") }

func adam8bitMomentsAVX2(p, grad *float32, mCodes *int8, sCodes *uint8, ms, ss *float32, n int, k *adam8bitVector) {
	panic("optim: no AVX2 kernel on this platform")
}

func adam8bitCodesAVX2(ms, ss *float32, mCodes *int8, sCodes *uint8, n int, k *adam8bitVector) {
	panic("optim: no AVX2 kernel on this platform")
}

func squaresAVX2(grad *float32, n int, k *adamVector) float64 {
	panic("optim: no AVX2 kernel on this platform")
}
