#!/usr/bin/env python3
"""Writes a pre-quantized Hugging Face checkpoint of a model directory, in the
layouts GPTQ and compressed-tensors store on the Hub, plus reference.safetensors
with every quantized projection dequantized (fp32) from the written tensors.

Written from the formats' descriptions (AutoGPTQ's qweight/qzeros/scales, the
compressed-tensors pack-quantized and int-quantized compressors), with numpy
only, so that halo's C++ loader is checked against an independent reading.

usage: make_quantized_checkpoint.py SRC_DIR OUT_DIR FORMAT [--group N]
FORMAT: gptq4 | gptq4-asym | gptq8 | ct-w4a16 | ct-w4a16-asym | ct-w8a8
"""
import argparse
import json
import os
import shutil
import struct
import sys

import numpy as np

PROJ = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
DT = {"F32": np.float32, "F16": np.float16, "I32": np.int32, "I8": np.int8, "I64": np.int64}


def read_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        buf = raw[8 + n + b:8 + n + e]
        if info["dtype"] == "BF16":
            a = (np.frombuffer(buf, "<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            a = np.frombuffer(buf, DT[info["dtype"]])
        out[name] = (info["dtype"], a.reshape(info["shape"]))
    return out


def write_safetensors(path, tensors):
    """tensors: {name: (dtype, array)}; arrays written as that dtype."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        dtype, a = tensors[name]
        if dtype == "BF16":
            u = np.ascontiguousarray(a, np.float32).view(np.uint32).astype(np.uint64)
            data = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2").tobytes()
        else:
            data = np.ascontiguousarray(a, DT[dtype]).tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def pack_along(values, bits, axis):
    """uint values -> int32 words, 32/bits consecutive values along `axis`, lowest bits first."""
    per = 32 // bits
    v = np.moveaxis(values.astype(np.uint32), axis, 0)
    v = v.reshape(v.shape[0] // per, per, *v.shape[1:])
    words = np.zeros(v.shape[:1] + v.shape[2:], np.uint32)
    for i in range(per):
        words |= v[:, i] << np.uint32(bits * i)
    return np.moveaxis(words, 0, axis).view(np.int32)


def unpack_along(words, bits, axis):
    per = 32 // bits
    w = np.moveaxis(words.view(np.uint32), axis, 0)
    parts = [(w >> np.uint32(bits * i)) & np.uint32((1 << bits) - 1) for i in range(per)]
    v = np.stack(parts, axis=1).reshape(w.shape[0] * per, *w.shape[1:])
    return np.moveaxis(v, 0, axis).astype(np.int64)


def groups_of(w, g):
    out, inp = w.shape
    return w.reshape(out, inp // g, g)


def gptq(w, bits, g, sym):
    """-> tensors (qweight, qzeros, scales, g_idx) and the dequantized weight, read back from them."""
    out, inp = w.shape
    qmax = (1 << bits) - 1
    wg = groups_of(w, g)
    if sym:
        scale = np.maximum(np.abs(wg).max(axis=2) * 2 / qmax, 1e-8)
        zero = np.full(scale.shape, (qmax + 1) // 2)
    else:
        lo, hi = wg.min(axis=2), wg.max(axis=2)
        scale = np.maximum((hi - lo) / qmax, 1e-8)
        zero = np.clip(np.round(-lo / scale), 0, qmax)
    scale = scale.astype(np.float16)
    q = np.clip(np.round(wg / scale.astype(np.float32)[:, :, None]) + zero[:, :, None], 0, qmax).astype(np.int64)
    q = q.reshape(out, inp)
    qweight = pack_along(q.T.copy(), bits, 0)  # [in/per, out]
    qzeros = pack_along((zero.astype(np.int64) - 1).T.copy() & qmax, bits, 1)  # [groups, out/per], stores zero - 1
    tensors = {"qweight": ("I32", qweight), "qzeros": ("I32", qzeros), "scales": ("F16", scale.T.copy()),
               "g_idx": ("I32", (np.arange(inp) // g).astype(np.int32))}
    # Read back from the stored tensors: w = s * (q - (stored_zero + 1)).
    q_back = unpack_along(qweight, bits, 0).T  # [out, in]
    z_back = (unpack_along(qzeros, bits, 1).T + 1)  # [out, groups]
    s_back = tensors["scales"][1].T.astype(np.float32)
    ref = (q_back.reshape(out, inp // g, g) - z_back[:, :, None]) * s_back[:, :, None]
    return tensors, ref.reshape(out, inp).astype(np.float32)


def ct_packed(w, g, sym):
    out, inp = w.shape
    wg = groups_of(w, g)
    if sym:
        scale = np.maximum(np.abs(wg).max(axis=2) / 7.5, 1e-8)
        zp = np.zeros(scale.shape, np.int64)
    else:
        lo, hi = wg.min(axis=2), wg.max(axis=2)
        scale = np.maximum((hi - lo) / 15, 1e-8)
        zp = np.clip(np.round(-8 - lo / scale), -8, 7).astype(np.int64)
    scale = scale.astype(np.float16)
    q = np.clip(np.round(wg / scale.astype(np.float32)[:, :, None]) + zp[:, :, None], -8, 7).astype(np.int64)
    q = q.reshape(out, inp)
    tensors = {"weight_packed": ("I32", pack_along(q + 8, 4, 1)), "weight_scale": ("F16", scale),
               "weight_shape": ("I64", np.array([out, inp], np.int64))}
    if not sym:
        tensors["weight_zero_point"] = ("I32", pack_along(zp + 8, 4, 0))
    q_back = unpack_along(tensors["weight_packed"][1], 4, 1) - 8
    zp_back = unpack_along(tensors["weight_zero_point"][1], 4, 0) - 8 if not sym else np.zeros_like(zp)
    ref = (q_back.reshape(out, inp // g, g) - zp_back[:, :, None]) * scale.astype(np.float32)[:, :, None]
    return tensors, ref.reshape(out, inp).astype(np.float32)


def ct_int8(w):
    scale = np.maximum(np.abs(w).max(axis=1, keepdims=True) / 127, 1e-8).astype(np.float32)
    q = np.clip(np.round(w / scale), -128, 127).astype(np.int8)
    tensors = {"weight": ("I8", q), "weight_scale": ("BF16", scale)}
    s_back = read_bf16_roundtrip(scale)
    return tensors, (q.astype(np.float32) * s_back).astype(np.float32)


def read_bf16_roundtrip(a):
    u = np.ascontiguousarray(a, np.float32).view(np.uint32).astype(np.uint64)
    return (((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint32) << 16).view(np.float32)


def quant_config(fmt, group):
    if fmt.startswith("gptq"):
        return {"quant_method": "gptq", "bits": 8 if fmt == "gptq8" else 4, "group_size": group,
                "desc_act": False, "sym": fmt != "gptq4-asym", "checkpoint_format": "gptq"}
    packed = fmt != "ct-w8a8"
    weights = {"num_bits": 4 if packed else 8, "type": "int", "symmetric": fmt != "ct-w4a16-asym",
               "strategy": "group" if packed else "channel", "group_size": group if packed else None}
    acts = None if packed else {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "token",
                                "dynamic": True}
    return {"quant_method": "compressed-tensors", "format": "pack-quantized" if packed else "int-quantized",
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights, "input_activations": acts}},
            "ignore": ["lm_head"], "quantization_status": "compressed"}


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("src")
    p.add_argument("out")
    p.add_argument("format", choices=["gptq4", "gptq4-asym", "gptq8", "ct-w4a16", "ct-w4a16-asym", "ct-w8a8"])
    p.add_argument("--group", type=int, default=32)
    a = p.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    for f in os.listdir(a.src):
        if f != "model.safetensors" and os.path.isfile(os.path.join(a.src, f)):
            shutil.copy(os.path.join(a.src, f), os.path.join(a.out, f))
    src = read_safetensors(os.path.join(a.src, "model.safetensors"))
    tensors, refs = {}, {}
    for name, (dtype, arr) in src.items():
        base = name[:-len(".weight")] if name.endswith(".weight") else None
        if base is None or base.split(".")[-1] not in PROJ:
            tensors[name] = (dtype, arr.astype(np.float32))
            continue
        w = arr.astype(np.float32)
        if a.format.startswith("gptq"):
            t, ref = gptq(w, 8 if a.format == "gptq8" else 4, a.group, a.format != "gptq4-asym")
        elif a.format == "ct-w8a8":
            t, ref = ct_int8(w)
        else:
            t, ref = ct_packed(w, a.group, a.format != "ct-w4a16-asym")
        for k, v in t.items():
            tensors[f"{base}.{k}"] = v
        refs[name] = ("F32", ref)
    write_safetensors(os.path.join(a.out, "model.safetensors"), tensors)
    write_safetensors(os.path.join(a.out, "reference.safetensors"), refs)
    cfg = json.load(open(os.path.join(a.src, "config.json")))
    cfg["quantization_config"] = quant_config(a.format, a.group)
    json.dump(cfg, open(os.path.join(a.out, "config.json"), "w"), indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
