#!/usr/bin/python3
"""ggml block formats (the quantized tensor types of GGUF files) in numpy.

Written from the format description of the ggml block layouts; used by
tools/make_gguf.py to quantize and by the C++ GGUF loader's tests as an
independent reference for dequantization.

CLI:
    python3 tools/ggml_blocks.py dequant TYPE in.bin out.f32
        in.bin holds raw blocks of TYPE (q8_0, q4_0, q4_k, q5_k, q6_k, f16,
        bf16, f32), back to back, with nothing else; out.f32 receives the
        dequantized values as little-endian float32.
    python3 tools/ggml_blocks.py quant TYPE in.f32 out.bin
        the other way (TYPE q8_0, q4_0, f16, bf16, f32); the element count
        must be a multiple of the block size.

Quantization here divides by the scale as stored (fp16); ggml's own reference
quantizer divides by the float32 scale, so a value that lies almost exactly
between two steps may land one step apart. Dequantization is exact either way.

All multi-byte fields are little-endian. Layouts (bytes, in order):

  Q8_0  32 elements, 34 bytes: d fp16 | qs int8[32]
        x[i] = d * qs[i]; quantized with d = max|x| / 127, qs = round(x / d)
        (with d as stored, in fp16, so |error| <= max|x| / 254 up to fp16 rounding).
  Q4_0  32 elements, 18 bytes: d fp16 | qs uint8[16]
        byte j holds element j in its low nibble and element j + 16 in its
        high nibble; x = d * (nibble - 8). Quantized with m = the element of
        largest magnitude (with its sign), d = m / -8,
        nibble = clamp(round(x / d) + 8, 0, 15) (d as stored, in fp16). The
        error is at most d / 2 = max|x| / 16, except max|x| / 8 for a value
        of the opposite sign near -m (clamped to 15).
  Q4_K  256 elements (8 sub-blocks of 32), 144 bytes:
        d fp16 | dmin fp16 | scales uint8[12] | qs uint8[128]
        scales packs a 6-bit scale sc[j] and a 6-bit min m[j] per sub-block:
          j < 4:  sc[j] = scales[j] & 63, m[j] = scales[j + 4] & 63
          j >= 4: sc[j] = (scales[j + 4] & 15) | ((scales[j - 4] >> 6) << 4)
                  m[j]  = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4)
        qs is read in 4 chunks of 32 bytes; chunk c gives sub-block 2c from
        the low nibbles and sub-block 2c + 1 from the high nibbles:
        x = d * sc[j] * q - dmin * m[j].
  Q5_K  256 elements, 176 bytes:
        d fp16 | dmin fp16 | scales uint8[12] | qh uint8[32] | qs uint8[128]
        as Q4_K, plus a fifth (high) bit per element: for sub-block j the bit
        is bit j of qh[l] for element l (0..31) of that sub-block, so
        q = nibble + 16 * bit.
  Q6_K  256 elements (16 sub-blocks of 16), 210 bytes:
        ql uint8[128] | qh uint8[64] | scales int8[16] | d fp16
        two halves of 128 elements, each using 64 bytes of ql, 32 of qh and
        8 scales. Within a half, for l in 0..31:
          q(l)      = (ql[l]      & 15) | ((qh[l] >> 0 & 3) << 4)
          q(l + 32) = (ql[l + 32] & 15) | ((qh[l] >> 2 & 3) << 4)
          q(l + 64) = (ql[l]      >> 4) | ((qh[l] >> 4 & 3) << 4)
          q(l + 96) = (ql[l + 32] >> 4) | ((qh[l] >> 6 & 3) << 4)
        x(i) = d * scales[i // 16] * (q(i) - 32).
"""
import sys

import numpy as np

# type name -> (ggml type id, elements per block, bytes per block)
TYPES = {
    "f32": (0, 1, 4),
    "f16": (1, 1, 2),
    "q4_0": (2, 32, 18),
    "q8_0": (8, 32, 34),
    "q4_k": (12, 256, 144),
    "q5_k": (13, 256, 176),
    "q6_k": (14, 256, 210),
    "bf16": (30, 1, 2),
}


def _fp16(b):
    return b.copy().view("<f2").astype(np.float32)


def bf16_to_f32(u16):
    return (np.asarray(u16, dtype=np.uint32) << 16).view(np.float32)


def f32_to_bf16(x):
    """Round to nearest even; NaN stays NaN."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    rounded[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return rounded


def _round_half_away(x):
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def quantize_q8_0(x):
    x = np.asarray(x, dtype=np.float32).reshape(-1, 32)
    amax = np.abs(x).max(axis=1)
    d = (amax / 127.0).astype(np.float16).astype(np.float32)  # quantize with the stored (fp16) scale
    inv = np.divide(1.0, d, out=np.zeros_like(d), where=d != 0)
    q = np.clip(_round_half_away(x * inv[:, None]), -127, 127).astype(np.int8)
    out = np.empty((x.shape[0], 34), dtype=np.uint8)
    out[:, :2] = d.astype("<f2").view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out.tobytes()


def quantize_q4_0(x):
    x = np.asarray(x, dtype=np.float32).reshape(-1, 32)
    idx = np.abs(x).argmax(axis=1)
    m = x[np.arange(x.shape[0]), idx]
    d = (m / -8.0).astype(np.float16).astype(np.float32)
    inv = np.divide(1.0, d, out=np.zeros_like(d), where=d != 0)
    q = np.clip(np.floor(x * inv[:, None] + 8.5), 0, 15).astype(np.uint8)
    out = np.empty((x.shape[0], 18), dtype=np.uint8)
    out[:, :2] = d.astype("<f2").view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q[:, :16] | (q[:, 16:] << 4)
    return out.tobytes()


def _blocks(data, nbytes):
    b = np.frombuffer(data, dtype=np.uint8)
    if b.size % nbytes:
        raise ValueError(f"{b.size} bytes is not a whole number of {nbytes}-byte blocks")
    return b.reshape(-1, nbytes)


def dequant_q8_0(data):
    b = _blocks(data, 34)
    d = _fp16(b[:, :2]).reshape(-1, 1)
    return (d * b[:, 2:].copy().view(np.int8).astype(np.float32)).reshape(-1)


def dequant_q4_0(data):
    b = _blocks(data, 18)
    d = _fp16(b[:, :2]).reshape(-1, 1)
    qs = b[:, 2:]
    q = np.concatenate([qs & 15, qs >> 4], axis=1).astype(np.float32) - 8.0
    return (d * q).reshape(-1)


def _k_scales(scales):
    """12 packed bytes per block -> (sc[8], m[8]) as float32."""
    s = scales.astype(np.uint8)
    sc = np.empty((s.shape[0], 8), dtype=np.float32)
    mn = np.empty((s.shape[0], 8), dtype=np.float32)
    for j in range(4):
        sc[:, j] = s[:, j] & 63
        mn[:, j] = s[:, j + 4] & 63
    for j in range(4, 8):
        sc[:, j] = (s[:, j + 4] & 15) | ((s[:, j - 4] >> 6) << 4)
        mn[:, j] = (s[:, j + 4] >> 4) | ((s[:, j] >> 6) << 4)
    return sc, mn


def _dequant_k45(b, qh):
    d = _fp16(b[:, 0:2]).reshape(-1, 1)
    dmin = _fp16(b[:, 2:4]).reshape(-1, 1)
    sc, mn = _k_scales(b[:, 4:16])
    qs = b[:, -128:]
    out = np.empty((b.shape[0], 256), dtype=np.float32)
    for c in range(4):
        chunk = qs[:, 32 * c:32 * c + 32]
        for half, nib in ((0, chunk & 15), (1, chunk >> 4)):
            j = 2 * c + half
            q = nib.astype(np.float32)
            if qh is not None:
                q += 16.0 * ((qh >> j) & 1)
            out[:, 32 * j:32 * j + 32] = d * sc[:, j:j + 1] * q - dmin * mn[:, j:j + 1]
    return out.reshape(-1)


def dequant_q4_k(data):
    return _dequant_k45(_blocks(data, 144), None)


def dequant_q5_k(data):
    b = _blocks(data, 176)
    return _dequant_k45(b, b[:, 16:48])


def dequant_q6_k(data):
    b = _blocks(data, 210)
    ql, qh = b[:, 0:128], b[:, 128:192]
    scales = b[:, 192:208].copy().view(np.int8).astype(np.float32)
    d = _fp16(b[:, 208:210]).reshape(-1, 1)
    out = np.empty((b.shape[0], 256), dtype=np.float32)
    for h in range(2):
        l_ = ql[:, 64 * h:64 * h + 64]
        hh = qh[:, 32 * h:32 * h + 32]
        sc = scales[:, 8 * h:8 * h + 8]
        parts = [
            (l_[:, :32] & 15) | (((hh >> 0) & 3) << 4),
            (l_[:, 32:] & 15) | (((hh >> 2) & 3) << 4),
            (l_[:, :32] >> 4) | (((hh >> 4) & 3) << 4),
            (l_[:, 32:] >> 4) | (((hh >> 6) & 3) << 4),
        ]
        for p, q in enumerate(parts):
            qf = q.astype(np.float32) - 32.0
            for s in range(2):  # 16-element sub-blocks
                i = 128 * h + 32 * p + 16 * s
                out[:, i:i + 16] = d * sc[:, 2 * p + s:2 * p + s + 1] * qf[:, 16 * s:16 * s + 16]
    return out.reshape(-1)


def dequantize(type_name, data):
    t = type_name.lower()
    if t == "f32":
        return np.frombuffer(data, dtype="<f4").astype(np.float32)
    if t == "f16":
        return np.frombuffer(data, dtype="<f2").astype(np.float32)
    if t == "bf16":
        return bf16_to_f32(np.frombuffer(data, dtype="<u2"))
    fn = {"q8_0": dequant_q8_0, "q4_0": dequant_q4_0, "q4_k": dequant_q4_k, "q5_k": dequant_q5_k,
          "q6_k": dequant_q6_k}.get(t)
    if fn is None:
        raise ValueError(f"unknown type '{type_name}' (known: {', '.join(TYPES)})")
    return fn(data)


def quantize(type_name, x):
    t = type_name.lower()
    x = np.asarray(x, dtype=np.float32)
    if t == "f32":
        return x.astype("<f4").tobytes()
    if t == "f16":
        return x.astype("<f2").tobytes()
    if t == "bf16":
        return f32_to_bf16(x).astype("<u2").tobytes()
    if t == "q8_0":
        return quantize_q8_0(x)
    if t == "q4_0":
        return quantize_q4_0(x)
    raise ValueError(f"cannot quantize to '{type_name}' (supported: f32, f16, bf16, q8_0, q4_0)")


def main(argv):
    if len(argv) != 5 or argv[1] not in ("dequant", "quant"):
        sys.stderr.write("usage: ggml_blocks.py dequant|quant TYPE IN OUT\n")
        return 2
    _, cmd, t, src, dst = argv
    with open(src, "rb") as f:
        data = f.read()
    if cmd == "dequant":
        out = dequantize(t, data).astype("<f4").tobytes()
    else:
        out = quantize(t, np.frombuffer(data, dtype="<f4"))
    with open(dst, "wb") as f:
        f.write(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
