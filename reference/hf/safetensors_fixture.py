"""Writes and checks the safetensors test file of onegpu's hf/safetensors package, with the reference
implementation (the `safetensors` package, numpy only; ml_dtypes for bfloat16).

    python safetensors_fixture.py write OUT.safetensors   # the tensors below, as Python lays them out
    python safetensors_fixture.py check FILE.safetensors  # FILE holds exactly these tensors (e.g. written by Go)

Every value is a formula of its index and its tensor's number (value() below; the Go test computes
the same), so either side checks the other without a third reader.
"""
import sys

import ml_dtypes
import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

# name, numpy dtype, shape: one tensor of every type the Go package converts or passes through.
TENSORS = [
    ("model.embed_tokens.weight", np.float32, (4, 3)),
    ("model.norm.weight", ml_dtypes.bfloat16, (5,)),
    ("half", np.float16, (2, 2)),
    ("double", np.float64, ()),
    ("ids", np.int64, (3,)),
    ("ids32", np.int32, (2, 1)),
    ("small", np.int16, (2,)),
    ("tiny", np.int8, (3,)),
    ("bytes", np.uint8, (3,)),
    ("u16", np.uint16, (1,)),
    ("u32", np.uint32, (2,)),
    ("u64", np.uint64, (1,)),
    ("flags", np.bool_, (4,)),
    ("empty", np.float32, (0, 3)),
]
METADATA = {"format": "pt"}


def value(k, dtype, shape):
    """Tensor number k's values: small integers (times 0.25 for floats), exact in every type."""
    i = np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)
    base = (i * 7 + k * 3) % 23
    if dtype == np.bool_:
        return ((i + k) % 3 == 0).reshape(shape)
    if np.issubdtype(np.dtype(dtype), np.unsignedinteger):
        return base.astype(dtype).reshape(shape)
    if np.issubdtype(np.dtype(dtype), np.signedinteger):
        return (base - 11).astype(dtype).reshape(shape)
    return ((base - 11) * 0.25).astype(dtype).reshape(shape)


def write(path):
    save_file({name: value(k, dt, shape) for k, (name, dt, shape) in enumerate(TENSORS)}, path, metadata=METADATA)


def check(path):
    with safe_open(path, framework="numpy") as f:
        if f.metadata() != METADATA:
            sys.exit(f"metadata {f.metadata()}, want {METADATA}")
        names = set(f.keys())
        want = {name for name, _, _ in TENSORS}
        if names != want:
            sys.exit(f"tensors: missing {sorted(want - names)}, extra {sorted(names - want)}")
        for k, (name, dt, shape) in enumerate(TENSORS):
            got = f.get_tensor(name)
            expected = value(k, dt, shape)
            if got.dtype != np.dtype(dt) or got.shape != shape or not np.array_equal(got, expected):
                sys.exit(f"{name}: got {got.dtype}{list(got.shape)} {got.ravel()[:8]}, want {np.dtype(dt)}{list(shape)} {expected.ravel()[:8]}")
    print(f"ok: {len(TENSORS)} tensors")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("write", "check"):
        sys.exit(__doc__)
    (write if sys.argv[1] == "write" else check)(sys.argv[2])
