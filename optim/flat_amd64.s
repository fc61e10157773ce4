//go:build !purego

#include "textflag.h"

// func adamAVX2(p, grad, m, s *float32, n int, k *adamVector)
//
// adamScalars.apply, eight elements at a time (n a multiple of 8): the same operations in the same
// order, each rounded to float32 (no fused multiply-add). k's layout is adamVector's.
TEXT ·adamAVX2(SB), NOSPLIT, $0-48
	MOVQ p+0(FP), DI
	MOVQ grad+8(FP), SI
	MOVQ m+16(FP), R8
	MOVQ s+24(FP), R9
	MOVQ n+32(FP), CX
	MOVQ k+40(FP), DX
	VBROADCASTSS 0(DX), Y15  // learning rate
	VBROADCASTSS 4(DX), Y8   // beta1
	VBROADCASTSS 8(DX), Y10  // beta2
	VBROADCASTSS 12(DX), Y9  // 1 - beta1
	VBROADCASTSS 16(DX), Y11 // 1 - beta2
	VBROADCASTSS 20(DX), Y12 // debias1
	VBROADCASTSS 24(DX), Y13 // debias2
	VBROADCASTSS 28(DX), Y14 // epsilon
	VBROADCASTSS 32(DX), Y7  // weight decay
	MOVL 48(DX), R10         // the first divisor's kind: 0 none, 1 multiply, 2 divide
	MOVL 52(DX), R11         // the second's
	MOVL 56(DX), R12         // 1: multiply by the clip factor
	MOVL 60(DX), R13         // 1: weight decay
	XORQ AX, AX

loop:
	CMPQ AX, CX
	JGE  done
	VMOVUPS (SI)(AX*4), Y0 // g
	CMPL R10, $1
	JNE  div1
	VBROADCASTSS 36(DX), Y4
	VMULPS Y4, Y0, Y0
	JMP  second

div1:
	CMPL R10, $2
	JNE  second
	VBROADCASTSS 36(DX), Y4
	VDIVPS Y4, Y0, Y0

second:
	CMPL R11, $1
	JNE  div2
	VBROADCASTSS 40(DX), Y4
	VMULPS Y4, Y0, Y0
	JMP  clip

div2:
	CMPL R11, $2
	JNE  clip
	VBROADCASTSS 40(DX), Y4
	VDIVPS Y4, Y0, Y0

clip:
	CMPL R12, $0
	JE   moments
	VBROADCASTSS 44(DX), Y4
	VMULPS Y4, Y0, Y0

moments:
	VMOVUPS (R8)(AX*4), Y1 // m = beta1·m + (1-beta1)·g
	VMULPS  Y1, Y8, Y1
	VMULPS  Y0, Y9, Y4
	VADDPS  Y4, Y1, Y1
	VMOVUPS Y1, (R8)(AX*4)
	VMOVUPS (R9)(AX*4), Y2 // s = beta2·s + (1-beta2)·g²
	VMULPS  Y2, Y10, Y2
	VMULPS  Y0, Y0, Y4
	VMULPS  Y4, Y11, Y4
	VADDPS  Y4, Y2, Y2
	VMOVUPS Y2, (R9)(AX*4)
	VMULPS  Y2, Y13, Y2    // √(s·debias2) + ε
	VSQRTPS Y2, Y2
	VADDPS  Y14, Y2, Y2
	VMULPS  Y1, Y12, Y1    // lr·(m·debias1) / that
	VMULPS  Y1, Y15, Y1
	VDIVPS  Y2, Y1, Y1
	VMOVUPS (DI)(AX*4), Y3 // p
	CMPL    R13, $0
	JE      update
	VMULPS  Y3, Y7, Y4     // + lr·(p·decay)
	VMULPS  Y4, Y15, Y4
	VADDPS  Y4, Y1, Y1

update:
	VSUBPS  Y1, Y3, Y3
	VMOVUPS Y3, (DI)(AX*4)
	ADDQ    $8, AX
	JMP     loop

done:
	VZEROUPPER
	RET

// func bfloat16AVX2(dst *uint16, src *float32, n int)
//
// bfloat16ToNearest, sixteen elements at a time (n a multiple of 16).
TEXT ·bfloat16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	MOVL $0x7fff, AX
	VMOVD AX, X5
	VPBROADCASTD X5, Y5
	MOVL $1, AX
	VMOVD AX, X6
	VPBROADCASTD X6, Y6
	MOVL $0x40, AX
	VMOVD AX, X7
	VPBROADCASTD X7, Y7
	XORQ AX, AX

convert:
	CMPQ AX, CX
	JGE  converted
	VMOVDQU (SI)(AX*4), Y0
	VPSRLD  $16, Y0, Y2        // the high half
	VPAND   Y6, Y2, Y3         // its lowest bit: ties go to even
	VPADDD  Y5, Y0, Y4
	VPADDD  Y3, Y4, Y4
	VPSRLD  $16, Y4, Y4        // rounded to nearest
	VCMPPS  $3, Y0, Y0, Y3     // NaN lanes
	VPOR    Y7, Y2, Y2         // a NaN stays a NaN
	VBLENDVPS Y3, Y2, Y4, Y0
	VMOVDQU 32(SI)(AX*4), Y1
	VPSRLD  $16, Y1, Y2
	VPAND   Y6, Y2, Y3
	VPADDD  Y5, Y1, Y4
	VPADDD  Y3, Y4, Y4
	VPSRLD  $16, Y4, Y4
	VCMPPS  $3, Y1, Y1, Y3
	VPOR    Y7, Y2, Y2
	VBLENDVPS Y3, Y2, Y4, Y1
	VPACKUSDW Y1, Y0, Y0       // 16-bit halves, interleaved by 128-bit lanes
	VPERMQ  $0xd8, Y0, Y0      // in order
	VMOVDQU Y0, (DI)(AX*2)
	ADDQ    $16, AX
	JMP     convert

converted:
	VZEROUPPER
	RET

// func adam8bitMomentsAVX2(p, grad *float32, mCodes *int8, sCodes *uint8, ms, ss *float32, n int, k *adam8bitVector)
//
// The first half of adam8bitScalars.applyBlock, eight elements at a time (n a multiple of 8):
// the moments decoded from their codes with the block's old scales, the step (float64 lanes),
// the new parameters written to p, the new moments rounded to float32 into ms and ss, and the
// largest magnitude of each written to k.mMax and k.sMax.
TEXT ·adam8bitMomentsAVX2(SB), NOSPLIT, $0-64
	MOVQ p+0(FP), DI
	MOVQ grad+8(FP), SI
	MOVQ mCodes+16(FP), R10
	MOVQ sCodes+24(FP), R11
	MOVQ ms+32(FP), R12
	MOVQ ss+40(FP), R13
	MOVQ n+48(FP), CX
	MOVQ k+56(FP), DX
	MOVL 704(DX), R8 // the gradient's first divisor's kind: 0 none, 1 multiply, 2 divide
	MOVL 708(DX), R9 // the second's
	MOVL 712(DX), BX // 1: multiply by the clip factor
	VXORPS  Y14, Y14, Y14
	VXORPS  Y15, Y15, Y15
	VMOVUPS 256(DX), Y12 // the first moment's old scale
	VMOVUPS 288(DX), Y13 // the second's
	XORQ AX, AX

moments:
	CMPQ AX, CX
	JGE  momentsDone
	VMOVUPS (SI)(AX*4), Y2 // g
	CMPL R8, $1
	JNE  momentsDiv1
	VMULPS 320(DX), Y2, Y2
	JMP  momentsSecond

momentsDiv1:
	CMPL R8, $2
	JNE  momentsSecond
	VDIVPS 320(DX), Y2, Y2

momentsSecond:
	CMPL R9, $1
	JNE  momentsDiv2
	VMULPS 352(DX), Y2, Y2
	JMP  momentsClip

momentsDiv2:
	CMPL R9, $2
	JNE  momentsClip
	VDIVPS 352(DX), Y2, Y2

momentsClip:
	CMPL BX, $0
	JE   momentsDecode
	VMULPS 384(DX), Y2, Y2

momentsDecode:
	VPMOVSXBD (R10)(AX*1), Y0 // first moment: t = q·(1/127), t·|t|·scale
	VCVTDQ2PS Y0, Y0
	VMULPS    480(DX), Y0, Y0
	VANDPS    672(DX), Y0, Y1
	VMULPS    Y1, Y0, Y0
	VMULPS    Y12, Y0, Y0
	VPMOVZXBD (R11)(AX*1), Y1 // second moment: t = q·(1/255), (t²)²·scale
	VCVTDQ2PS Y1, Y1
	VMULPS    512(DX), Y1, Y1
	VMULPS    Y1, Y1, Y1
	VMULPS    Y1, Y1, Y1
	VMULPS    Y13, Y1, Y1
	VMOVUPS   (DI)(AX*4), Y3 // the parameter
	VMULPS    Y2, Y2, Y4     // g² in float32

	// Lanes 0-3, then 4-7, in float64: adam8bitScalars.step.
	VCVTPS2PD  X0, Y5 // β1·m + (1-β1)·g
	VCVTPS2PD  X2, Y6
	VMULPD     32(DX), Y5, Y5
	VMULPD     96(DX), Y6, Y6
	VADDPD     Y6, Y5, Y5
	VCVTPS2PD  X1, Y6 // β2·s + (1-β2)·g²
	VCVTPS2PD  X4, Y7
	VMULPD     64(DX), Y6, Y6
	VMULPD     128(DX), Y7, Y7
	VADDPD     Y7, Y6, Y6
	VCVTPD2PSY Y5, X7
	VMOVUPS    X7, (R12)(AX*4)
	VCVTPD2PSY Y6, X7
	VMOVUPS    X7, (R13)(AX*4)
	VMULPD     192(DX), Y6, Y6 // lr·(m·debias1) / (√(s·debias2) + ε)
	VSQRTPD    Y6, Y6
	VADDPD     224(DX), Y6, Y6
	VMULPD     160(DX), Y5, Y5
	VMULPD     0(DX), Y5, Y5
	VDIVPD     Y6, Y5, Y5
	VCVTPS2PD  X3, Y6 // the parameter minus that
	VSUBPD     Y5, Y6, Y6
	VCVTPD2PSY Y6, X6
	VMOVUPS    X6, (DI)(AX*4)

	VEXTRACTF128 $1, Y0, X0
	VEXTRACTF128 $1, Y1, X1
	VEXTRACTF128 $1, Y2, X2
	VEXTRACTF128 $1, Y3, X3
	VEXTRACTF128 $1, Y4, X4
	VCVTPS2PD    X0, Y5
	VCVTPS2PD    X2, Y6
	VMULPD       32(DX), Y5, Y5
	VMULPD       96(DX), Y6, Y6
	VADDPD       Y6, Y5, Y5
	VCVTPS2PD    X1, Y6
	VCVTPS2PD    X4, Y7
	VMULPD       64(DX), Y6, Y6
	VMULPD       128(DX), Y7, Y7
	VADDPD       Y7, Y6, Y6
	VCVTPD2PSY   Y5, X7
	VMOVUPS      X7, 16(R12)(AX*4)
	VCVTPD2PSY   Y6, X7
	VMOVUPS      X7, 16(R13)(AX*4)
	VMULPD       192(DX), Y6, Y6
	VSQRTPD      Y6, Y6
	VADDPD       224(DX), Y6, Y6
	VMULPD       160(DX), Y5, Y5
	VMULPD       0(DX), Y5, Y5
	VDIVPD       Y6, Y5, Y5
	VCVTPS2PD    X3, Y6
	VSUBPD       Y5, Y6, Y6
	VCVTPD2PSY   Y6, X6
	VMOVUPS      X6, 16(DI)(AX*4)

	VMOVUPS (R12)(AX*4), Y8 // the largest magnitudes so far
	VANDPS  672(DX), Y8, Y8
	VMAXPS  Y8, Y14, Y14
	VMOVUPS (R13)(AX*4), Y8
	VMAXPS  Y8, Y15, Y15
	ADDQ    $8, AX
	JMP     moments

momentsDone:
	VEXTRACTF128 $1, Y14, X0
	VMAXPS       X0, X14, X14
	VPERMILPS    $0x4e, X14, X0
	VMAXPS       X0, X14, X14
	VPERMILPS    $0xb1, X14, X0
	VMAXPS       X0, X14, X14
	VMOVSS       X14, 716(DX)
	VEXTRACTF128 $1, Y15, X0
	VMAXPS       X0, X15, X15
	VPERMILPS    $0x4e, X15, X0
	VMAXPS       X0, X15, X15
	VPERMILPS    $0xb1, X15, X0
	VMAXPS       X0, X15, X15
	VMOVSS       X15, 720(DX)
	VZEROUPPER
	RET

// func adam8bitCodesAVX2(ms, ss *float32, mCodes *int8, sCodes *uint8, n int, k *adam8bitVector)
//
// The second half of adam8bitScalars.applyBlock, eight elements at a time (n a multiple of 8):
// nearestCode for each moment, given the block's new scales (k.mScale, k.sScale) and their
// reciprocals (k.mInverse, k.sInverse).
TEXT ·adam8bitCodesAVX2(SB), NOSPLIT, $0-48
	MOVQ ms+0(FP), SI
	MOVQ ss+8(FP), R8
	MOVQ mCodes+16(FP), DI
	MOVQ sCodes+24(FP), R9
	MOVQ n+32(FP), CX
	MOVQ k+40(FP), DX
	VMOVUPS 256(DX), Y12 // the first moment's new scale
	VMOVUPS 288(DX), Y13 // the second's
	VXORPS  Y11, Y11, Y11
	XORQ    AX, AX

codes:
	CMPQ AX, CX
	JGE  codesDone

	// First moment: the estimate RoundHalfUp(√(|m|·inverse)·127), at most 127 (code 0 for NaN).
	VMOVUPS  (SI)(AX*4), Y0
	VANDPS   672(DX), Y0, Y1
	VMULPS   416(DX), Y1, Y2
	VSQRTPS  Y2, Y2
	VMULPS   608(DX), Y2, Y2
	VROUNDPS $1, Y2, Y3
	VADDPS   544(DX), Y3, Y4
	VCMPPS   $13, Y4, Y2, Y5
	VANDPS   576(DX), Y5, Y5
	VADDPS   Y5, Y3, Y3
	VMINPS   608(DX), Y3, Y3
	VCMPPS   $13, Y11, Y2, Y6 // not NaN
	VANDPS   Y6, Y3, Y3

	// The thresholds around it: ((e∓½)·(1/127))²·scale.
	VSUBPS 544(DX), Y3, Y4
	VMULPS 480(DX), Y4, Y4
	VMULPS Y4, Y4, Y4
	VMULPS Y12, Y4, Y4
	VADDPS 544(DX), Y3, Y5
	VMULPS 480(DX), Y5, Y5
	VMULPS Y5, Y5, Y5
	VMULPS Y12, Y5, Y5

	// One down if below the lower (and above 0), one up if at or above the upper (and below 127).
	VCMPPS    $14, Y11, Y3, Y7
	VCMPPS    $1, Y4, Y1, Y8
	VANDPS    Y8, Y7, Y7
	VCMPPS    $1, 608(DX), Y3, Y8
	VCMPPS    $14, Y11, Y1, Y9
	VANDPS    Y9, Y8, Y8
	VCMPPS    $13, Y5, Y1, Y9
	VANDPS    Y9, Y8, Y8
	VANDPS    Y6, Y8, Y8 // never up from a NaN's estimate
	VANDPS    576(DX), Y7, Y7
	VSUBPS    Y7, Y3, Y9
	VADDPS    576(DX), Y3, Y10
	VBLENDVPS Y8, Y10, Y9, Y9
	VCMPPS    $1, Y11, Y0, Y7 // negative: minus the code
	VSUBPS    Y9, Y11, Y10
	VBLENDVPS Y7, Y10, Y9, Y9
	VCVTTPS2DQ   Y9, Y9
	VEXTRACTI128 $1, Y9, X10
	VPACKSSDW    X10, X9, X9
	VPACKSSWB    X9, X9, X9
	VMOVQ        X9, (DI)(AX*1)

	// Second moment: the estimate RoundHalfUp(√√(s·inverse)·255), at most 255 (0 for NaN).
	VMOVUPS  (R8)(AX*4), Y1
	VMULPS   448(DX), Y1, Y2
	VSQRTPS  Y2, Y2
	VSQRTPS  Y2, Y2
	VMULPS   640(DX), Y2, Y2
	VROUNDPS $1, Y2, Y3
	VADDPS   544(DX), Y3, Y4
	VCMPPS   $13, Y4, Y2, Y5
	VANDPS   576(DX), Y5, Y5
	VADDPS   Y5, Y3, Y3
	VMINPS   640(DX), Y3, Y3
	VCMPPS   $13, Y11, Y2, Y6 // not NaN
	VANDPS   Y6, Y3, Y3

	// The thresholds around it: (((e∓½)·(1/255))²)²·scale.
	VSUBPS 544(DX), Y3, Y4
	VMULPS 512(DX), Y4, Y4
	VMULPS Y4, Y4, Y4
	VMULPS Y4, Y4, Y4
	VMULPS Y13, Y4, Y4
	VADDPS 544(DX), Y3, Y5
	VMULPS 512(DX), Y5, Y5
	VMULPS Y5, Y5, Y5
	VMULPS Y5, Y5, Y5
	VMULPS Y13, Y5, Y5

	VCMPPS    $14, Y11, Y3, Y7
	VCMPPS    $1, Y4, Y1, Y8
	VANDPS    Y8, Y7, Y7
	VCMPPS    $1, 640(DX), Y3, Y8
	VCMPPS    $14, Y11, Y1, Y9
	VANDPS    Y9, Y8, Y8
	VCMPPS    $13, Y5, Y1, Y9
	VANDPS    Y9, Y8, Y8
	VANDPS    Y6, Y8, Y8 // never up from a NaN's estimate
	VANDPS    576(DX), Y7, Y7
	VSUBPS    Y7, Y3, Y9
	VADDPS    576(DX), Y3, Y10
	VBLENDVPS Y8, Y10, Y9, Y9
	VCMPPS    $14, Y11, Y1, Y7 // positive: at least code 1
	VMAXPS    576(DX), Y9, Y10
	VBLENDVPS Y7, Y10, Y9, Y9
	VCVTTPS2DQ   Y9, Y9
	VEXTRACTI128 $1, Y9, X10
	VPACKUSDW    X10, X9, X9
	VPACKUSWB    X9, X9, X9
	VMOVQ        X9, (R9)(AX*1)

	ADDQ $8, AX
	JMP  codes

codesDone:
	VZEROUPPER
	RET

// func squaresAVX2(grad *float32, n int, k *adamVector) float64
//
// The sum of the squares of grad's elements divided as k's divisors say (not clipped), in float64
// with eight running sums (n a multiple of 8): Partials' pass. A non-finite element makes it
// non-finite.
TEXT ·squaresAVX2(SB), NOSPLIT, $0-32
	MOVQ grad+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ k+16(FP), DX
	MOVL 48(DX), R10
	MOVL 52(DX), R11
	VXORPD Y14, Y14, Y14
	VXORPD Y15, Y15, Y15
	XORQ   AX, AX

squares:
	CMPQ AX, CX
	JGE  squaresDone
	VMOVUPS (SI)(AX*4), Y0
	CMPL R10, $1
	JNE  squaresDiv1
	VBROADCASTSS 36(DX), Y4
	VMULPS Y4, Y0, Y0
	JMP  squaresSecond

squaresDiv1:
	CMPL R10, $2
	JNE  squaresSecond
	VBROADCASTSS 36(DX), Y4
	VDIVPS Y4, Y0, Y0

squaresSecond:
	CMPL R11, $1
	JNE  squaresDiv2
	VBROADCASTSS 40(DX), Y4
	VMULPS Y4, Y0, Y0
	JMP  squaresAdd

squaresDiv2:
	CMPL R11, $2
	JNE  squaresAdd
	VBROADCASTSS 40(DX), Y4
	VDIVPS Y4, Y0, Y0

squaresAdd:
	VCVTPS2PD    X0, Y1
	VMULPD       Y1, Y1, Y1
	VADDPD       Y1, Y14, Y14
	VEXTRACTF128 $1, Y0, X0
	VCVTPS2PD    X0, Y1
	VMULPD       Y1, Y1, Y1
	VADDPD       Y1, Y15, Y15
	ADDQ         $8, AX
	JMP          squares

squaresDone:
	VADDPD       Y15, Y14, Y14
	VEXTRACTF128 $1, Y14, X0
	VADDPD       X0, X14, X14
	VPERMILPD    $1, X14, X0
	VADDSD       X0, X14, X14
	VMOVSD       X14, ret+24(FP)
	VZEROUPPER
	RET
