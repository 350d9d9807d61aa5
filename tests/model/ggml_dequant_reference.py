#!/usr/bin/env python3
"""Independent numpy reference of ggml's block dequantization (Q8_0, Q4_0,
Q4_K, Q5_K, Q6_K), written from the format description (ggml's block
layouts), checked against halo's C++ dequantization.

    ggml_dequant_reference.py DUMPER   runs DUMPER (ggml_dump_blocks) into a
                                       temporary directory and compares
    ggml_dequant_reference.py --dir D  compares the dumps already in D

Each value is recomputed in float64 and compared with a tolerance of a few
float32 roundings of its terms (ggml computes in float32)."""
import os
import subprocess
import sys
import tempfile

import numpy as np

QK_K = 256


def halves(raw):
    """uint8 [..., 2] -> float64 of the little-endian IEEE halves."""
    return np.ascontiguousarray(raw).view("<f2").astype(np.float64)[..., 0]


def q8_0(b):
    # block: fp16 d, int8 qs[32]; x = d * q
    d = halves(b[:, 0:2])
    q = b[:, 2:34].view(np.int8).astype(np.float64)
    return d[:, None] * q, np.abs(d[:, None] * q)


def q4_0(b):
    # block: fp16 d, 16 bytes; x[j] = d * (low nibble of byte j - 8),
    # x[j + 16] = d * (high nibble of byte j - 8)
    d = halves(b[:, 0:2])
    qs = b[:, 2:18]
    q = np.concatenate([qs & 0xF, qs >> 4], axis=1).astype(np.float64) - 8
    return d[:, None] * q, np.abs(d[:, None] * q)


def k_scales(s):
    """12 packed bytes -> 8 six-bit scales and 8 six-bit mins."""
    s = s.astype(np.int64)
    sc = np.zeros((s.shape[0], 8), np.int64)
    mn = np.zeros((s.shape[0], 8), np.int64)
    for j in range(4):
        sc[:, j] = s[:, j] & 63
        mn[:, j] = s[:, j + 4] & 63
        sc[:, j + 4] = (s[:, j + 8] & 0xF) | ((s[:, j] >> 6) << 4)
        mn[:, j + 4] = (s[:, j + 8] >> 4) | ((s[:, j + 4] >> 6) << 4)
    return sc, mn


def k_quants(qs, qh):
    """Q4_K / Q5_K quants in element order: chunk c of 64 elements uses bytes
    32c..32c+31, low nibbles first then high nibbles; Q5_K adds bit 2c (first
    32) or 2c+1 (second 32) of qh[l] as the value 16."""
    q = np.zeros((qs.shape[0], QK_K), np.int64)
    for c in range(4):
        chunk = qs[:, 32 * c:32 * c + 32].astype(np.int64)
        q[:, 64 * c:64 * c + 32] = chunk & 0xF
        q[:, 64 * c + 32:64 * c + 64] = chunk >> 4
        if qh is not None:
            h = qh.astype(np.int64)
            q[:, 64 * c:64 * c + 32] += ((h >> (2 * c)) & 1) * 16
            q[:, 64 * c + 32:64 * c + 64] += ((h >> (2 * c + 1)) & 1) * 16
    return q


def k_dequant(b, five):
    # block: fp16 d, fp16 dmin, scales[12], (Q5_K: qh[32]), qs[128]
    d = halves(b[:, 0:2])
    dmin = halves(b[:, 2:4])
    sc, mn = k_scales(b[:, 4:16])
    qs = b[:, 48:176] if five else b[:, 16:144]
    q = k_quants(qs, b[:, 16:48] if five else None)
    sub = np.arange(QK_K) // 32
    scale = d[:, None] * sc[:, sub]
    offset = dmin[:, None] * mn[:, sub]
    return scale * q - offset, np.abs(scale * q) + np.abs(offset)


def q6_k(b):
    # block: ql[128], qh[64], int8 scales[16], fp16 d. Element
    # e = 128h + 32k + l: low 4 bits from ql[64h + l + 32(k&1)] (high nibble
    # for k >= 2), top 2 bits from bits 2k of qh[32h + l]; minus 32; scale
    # scales[e // 16].
    ql = b[:, 0:128].astype(np.int64)
    qh = b[:, 128:192].astype(np.int64)
    sc = b[:, 192:208].view(np.int8).astype(np.float64)
    d = halves(b[:, 208:210])
    q = np.zeros((b.shape[0], QK_K), np.int64)
    for h in range(2):
        for k in range(4):
            lo = ql[:, 64 * h + 32 * (k & 1):64 * h + 32 * (k & 1) + 32]
            lo = (lo >> 4) if k >= 2 else (lo & 0xF)
            hi = (qh[:, 32 * h:32 * h + 32] >> (2 * k)) & 3
            q[:, 128 * h + 32 * k:128 * h + 32 * k + 32] = (lo | (hi << 4)) - 32
    scale = d[:, None] * sc[:, np.arange(QK_K) // 16]
    return scale * q, np.abs(scale * q)


TYPES = {
    "Q8_0": (34, q8_0),
    "Q4_0": (18, q4_0),
    "Q4_K": (144, lambda b: k_dequant(b, False)),
    "Q5_K": (176, lambda b: k_dequant(b, True)),
    "Q6_K": (210, q6_k),
}


def compare(directory):
    failures = 0
    for name, (size, fn) in TYPES.items():
        raw = np.fromfile(os.path.join(directory, name + ".blocks"), np.uint8)
        got = np.fromfile(os.path.join(directory, name + ".f32"), "<f4").astype(np.float64)
        blocks = raw.reshape(-1, size)
        want, magnitude = fn(blocks)
        want, magnitude = want.reshape(-1), magnitude.reshape(-1)
        if want.shape != got.shape:
            print(f"{name}: {got.size} values, expected {want.size}")
            failures += 1
            continue
        tol = 4 * np.finfo(np.float32).eps * magnitude + 1e-45
        bad = np.abs(want - got) > tol
        if bad.any():
            i = int(np.argmax(bad))
            print(f"{name}: {int(bad.sum())} of {got.size} values differ; first at {i}: halo {got[i]!r}, "
                  f"reference {want[i]!r}")
            failures += 1
        else:
            print(f"{name}: {blocks.shape[0]} blocks, {got.size} values match")
    return failures


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--dir":
        return 1 if compare(sys.argv[2]) else 0
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([sys.argv[1], d], check=True)
        return 1 if compare(d) else 0


if __name__ == "__main__":
    sys.exit(main())
