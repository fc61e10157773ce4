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
