"""quant's fixture from bitsandbytes itself: NF4 codes, block scales and their double quantization.

    python nf4_fixture.py [OUT]    # writes OUT (default quant/testdata/bnb_nf4.safetensors)

bitsandbytes 0.50.2 on the CPU: quantize_4bit runs its reference ("default") kernel (torch.bucketize
against the midpoints of the NF4 levels), the same rule as its CUDA kernel's decision tree. The
double quantization (quantize_4bit's compress_statistics) calls quantize_blockwise, which on the CPU
runs a C++ kernel that looks codes up in a 65,536-bin table: an approximation of the nearest level
near zero, where the dynamic map's levels are closer than a bin. The fixture keeps both: the scale
codes of the reference kernel (what onegpu computes, and what CUDA computes), reached by
redispatching to bitsandbytes' default implementation, and the CPU kernel's, so that the test can
count where they differ.

Tensors (float32 unless said):
  input [16650]          260 blocks of 64 and 10 more (a partial block), normal values times a
                         scale per block from 1e-3 to 1, one block of zeros
  nf4_levels [16], dynamic_map [256]   bitsandbytes' tables
  codes uint8 [8325]     quantize_4bit(input, blocksize=64, quant_type="nf4"), two codes a byte
  absmax [261]           its block scales
  offset []              absmax.mean(), as compress_statistics computes it
  scale_codes uint8 [261], scale_scales [2]   quantize_blockwise(absmax - offset, blocksize=256),
                         the default (reference) kernel
  scale_codes_cpu uint8 [261]   the same by quantize_4bit(compress_statistics=True) on the CPU kernel
  dequantized [16650]    dequantize_4bit of codes with the double-quantized scales above
  bf16_input bfloat16 [7, 40], bf16_codes uint8 [140], bf16_absmax [5]   a bfloat16 tensor, quantized
"""
import sys

import numpy as np
import torch
from safetensors.torch import save_file

import bitsandbytes
import bitsandbytes.functional as F
from bitsandbytes.functional import QuantState


def default_kernel(op, *args):
    """Runs bitsandbytes' reference implementation of op, not the CPU library's."""
    keys = torch._C.DispatchKeySet(torch._C.DispatchKey.CompositeExplicitAutograd)
    return op.redispatch(keys, *args)


def main(out):
    torch.manual_seed(36)
    blocks, rem = 260, 10
    x = torch.randn(blocks * 64 + rem, dtype=torch.float32)
    scale = 10 ** (-3 * torch.rand(blocks + 1))
    x = (x.reshape(-1)[: blocks * 64].reshape(blocks, 64) * scale[:blocks, None]).reshape(-1)
    x = torch.cat([x, torch.randn(rem) * scale[blocks]])
    x[5 * 64 : 6 * 64] = 0

    codes, absmax = default_kernel(torch.ops.bitsandbytes.quantize_4bit.default, x, 64, "nf4", torch.uint8)
    ref_codes, ref_state = F.quantize_4bit(x, blocksize=64, compress_statistics=False, quant_type="nf4")
    assert torch.equal(codes.reshape(-1), ref_codes.reshape(-1)) and torch.equal(absmax, ref_state.absmax)

    dynamic = F.create_dynamic_map().to(torch.float32)
    offset = absmax.mean()
    scale_codes, scale_scales = default_kernel(torch.ops.bitsandbytes.quantize_blockwise.default, absmax - offset, dynamic, 256)
    _, cpu_state = F.quantize_4bit(x, blocksize=64, compress_statistics=True, quant_type="nf4")
    assert torch.equal(cpu_state.offset, offset) and torch.equal(cpu_state.state2.absmax, scale_scales)

    state2 = QuantState(absmax=scale_scales, code=dynamic, blocksize=256, dtype=torch.float32)
    state = QuantState(absmax=scale_codes, shape=x.shape, code=F.get_4bit_type("nf4", device="cpu"), blocksize=64,
                       quant_type="nf4", dtype=torch.float32, offset=offset, state2=state2)
    dequantized = F.dequantize_4bit(codes, state)

    xb = (torch.randn(7, 40) * 0.05).to(torch.bfloat16)
    bcodes, bstate = F.quantize_4bit(xb, blocksize=64, compress_statistics=False, quant_type="nf4")

    tensors = {
        "input": x, "nf4_levels": F.get_4bit_type("nf4", device="cpu").to(torch.float32), "dynamic_map": dynamic,
        "codes": codes.reshape(-1), "absmax": absmax, "offset": offset.reshape(()),
        "scale_codes": scale_codes.reshape(-1), "scale_scales": scale_scales,
        "scale_codes_cpu": cpu_state.absmax.reshape(-1), "dequantized": dequantized.reshape(-1),
        "bf16_input": xb, "bf16_codes": bcodes.reshape(-1), "bf16_absmax": bstate.absmax,
    }
    save_file({k: v.contiguous() for k, v in tensors.items()}, out,
              metadata={"bitsandbytes": bitsandbytes.__version__, "torch": torch.__version__})
    differ = int((cpu_state.absmax.reshape(-1) != scale_codes.reshape(-1)).sum())
    print(f"wrote {out}: {x.numel()} values, {absmax.numel()} blocks; the CPU kernel's scale codes differ from the reference's in {differ} of {absmax.numel()}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "quant/testdata/bnb_nf4.safetensors")
