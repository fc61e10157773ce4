//go:build !purego

package optim

import "golang.org/x/sys/cpu"

// The flat loops' vector kernels for amd64 with AVX2 (flat_amd64.s): the same operations as the Go
// loops, eight float32 lanes at a time, each rounded as the scalar one is (no fused multiply-add),
// so their results are the Go loops' bit for bit. Go does not vectorize, and on a shared machine a
// scalar loop is bound by the cores before the memory.

// hasAVX2 says the vector kernels run (the purego build tag turns them off).
var hasAVX2 = cpu.X86.HasAVX2

//go:noescape
func adamAVX2(p, grad, m, s *float32, n int, k *adamVector)

//go:noescape
func bfloat16AVX2(dst *uint16, src *float32, n int)

//go:noescape
func adam8bitMomentsAVX2(p, grad *float32, mCodes *int8, sCodes *uint8, ms, ss *float32, n int, k *adam8bitVector)

//go:noescape
func adam8bitCodesAVX2(ms, ss *float32, mCodes *int8, sCodes *uint8, n int, k *adam8bitVector)

//go:noescape
func squaresAVX2(grad *float32, n int, k *adamVector) float64
