#!/usr/bin/env python3
"""[fp8 kv] Reference E4M3 codes from torch for tests/unit/test_kv_fp8.c.

Purpose: the FP8 KV cache stores e4m3(x / scale) with the host conversion sits_f32_to_f8e4m3
  (round to nearest even, saturating at +-448). This script writes what torch's float8_e4m3fn cast
  gives, after a clamp to [-448, 448] (vLLM's scaled_fp8_quant clamps the same way; torch 2.15
  saturates by itself too), for
    1. every one of the 2^16 bf16 bit patterns (widened to fp32 exactly), and
    2. a fixed fp32 sample: every midpoint between two adjacent non-negative e4m3 values, one fp32
       ulp either side of each, values around 448 / 464 / 480 and past them, the subnormal range,
       and 2048 log-uniform magnitudes in [2^-14, 2^10] with random signs (torch.Generator seed 22);
  so the C test can compare all of them bit for bit without torch.
  NaN inputs are written as torch gives them (0x7f / 0xff); the test accepts any NaN code there.

File tests/unit/data/kv_fp8/e4m3_ref.bin, little-endian:
  u8  bf16_code[65536]       (index = the bf16 bit pattern)
  u32 n
  f32 x[n]
  u8  code[n]

Modes (nothing is written unless asked):
  python3 tests/ref/gen_kv_fp8_ref.py --write   (or SITS_REGEN=1): write the fixture
  python3 tests/ref/gen_kv_fp8_ref.py --check   regenerate in memory and compare with the file
"""

import os
import struct
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "unit", "data", "kv_fp8", "e4m3_ref.bin")


def e4m3(x):
    """fp32 tensor -> uint8 e4m3fn codes, torch's cast after the clamp."""
    return torch.clamp(x, -448.0, 448.0).to(torch.float8_e4m3fn).view(torch.uint8)


def build():
    bits = torch.arange(65536, dtype=torch.int32).to(torch.int16)
    bf = bits.view(torch.bfloat16).to(torch.float32)
    codes_bf = e4m3(bf)
    # the sample
    pos = torch.arange(0, 127, dtype=torch.uint8).view(torch.float8_e4m3fn).to(torch.float32)  # 0 .. 448
    mids = (pos[:-1] + pos[1:]) / 2  # exact in fp32
    up = torch.nextafter(mids, torch.full_like(mids, float("inf")))
    dn = torch.nextafter(mids, torch.full_like(mids, 0.0))
    edge = torch.tensor([448.0, 455.9, 456.0, 456.1, 463.9, 464.0, 464.1, 479.9, 480.0, 480.1, 500.0, 1e4, 3.0e38,
                         float("inf"), 2.0 ** -9, 2.0 ** -10, 2.0 ** -10 * 1.0000001, 2.0 ** -10 * 0.9999999,
                         2.0 ** -11, 1e-30, 0.0, 2.0 ** -6, 2.0 ** -6 * 0.9999999, 0.015625 - 2.0 ** -10],
                        dtype=torch.float32)
    g = torch.Generator().manual_seed(22)
    mag = torch.exp2(torch.rand(2048, generator=g, dtype=torch.float64) * 24.0 - 14.0).to(torch.float32)
    sign = torch.where(torch.rand(2048, generator=g) < 0.5, -1.0, 1.0)
    base = torch.cat([mids, up, dn, edge])
    x = torch.cat([base, -base, mag * sign]).to(torch.float32)
    codes_x = e4m3(x)
    out = bytearray(codes_bf.numpy().tobytes())
    out += struct.pack("<I", x.numel())
    out += x.numpy().astype("<f4").tobytes()
    out += codes_x.numpy().tobytes()
    return bytes(out)


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if os.environ.get("SITS_REGEN") == "1":
        mode = "--write"
    data = build()
    if mode == "--write":
        os.makedirs(os.path.dirname(OUT), exist_ok=True)
        with open(OUT, "wb") as f:
            f.write(data)
        print(f"wrote {OUT} ({len(data)} bytes, torch {torch.__version__})")
        return 0
    if mode == "--check":
        with open(OUT, "rb") as f:
            old = f.read()
        same = old == data
        print("e4m3_ref.bin matches torch" if same else "e4m3_ref.bin DIFFERS from torch")
        return 0 if same else 1
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
