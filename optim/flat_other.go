//go:build !amd64 || purego

package optim

// No vector kernels here: the flat loops run as Go.
const hasAVX2 = false

func adamAVX2(p, grad, m, s *float32, n int, k *adamVector) {
	panic("optim: no AVX2 kernel on this platform")
}

func bfloat16AVX2(dst *uint16, src *float32, n int) { panic("optim: no AVX2 kernel on this platform") }
