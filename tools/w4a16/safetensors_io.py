"""Reads and writes safetensors checkpoints (single file or sharded with an index) with numpy only.

bfloat16 has no numpy dtype: it is read into float32 (exactly) and written from float32 by rounding
to nearest even, the way torch does.
"""
import json
import os
import struct

import numpy as np

_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
    "I16": np.int16, "I8": np.int8, "U8": np.uint8,
}


def bf16_bits_to_f32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(values):
    """Round-to-nearest-even float32 -> bfloat16 bit patterns (uint16)."""
    x = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = x + (0x7FFF + ((x >> 16) & 1))
    bits = (rounded >> 16).astype(np.uint16)
    nan = (x & 0x7FFFFFFF) > 0x7F800000
    bits[nan] = ((x[nan] >> 16) | 0x40).astype(np.uint16)
    return bits


def round_to(dtype, values):
    """float32 values rounded to what a tensor of `dtype` ("BF16", "F16", "F32") holds."""
    values = np.asarray(values, dtype=np.float32)
    if dtype == "BF16":
        return bf16_bits_to_f32(f32_to_bf16_bits(values))
    if dtype == "F16":
        return values.astype(np.float16).astype(np.float32)
    return values


def read_file(path):
    """{name: (safetensors dtype, numpy array)}; BF16 comes back as float32."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = data[begin:end]
        dtype, shape = info["dtype"], info["shape"]
        if dtype == "BF16":
            arr = bf16_bits_to_f32(np.frombuffer(raw, dtype=np.uint16)).reshape(shape)
        else:
            arr = np.frombuffer(raw, dtype=_DTYPES[dtype]).reshape(shape).copy()
        out[name] = (dtype, arr)
    return out


def read_checkpoint(directory):
    index = os.path.join(directory, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    out = {}
    for name in files:
        out.update(read_file(os.path.join(directory, name)))
    return out


def _encode(dtype, array):
    if dtype == "BF16":
        return f32_to_bf16_bits(array).tobytes()
    return np.ascontiguousarray(array, dtype=_DTYPES[dtype]).tobytes()


def write_file(path, tensors):
    """`tensors`: {name: (safetensors dtype, array)}, written in name order, 8-byte aligned."""
    header, chunks, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        dtype, array = tensors[name]
        raw = _encode(dtype, array)
        header[name] = {"dtype": dtype, "shape": list(np.shape(array)), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for c in chunks:
            f.write(c)


def write_checkpoint(directory, tensors, max_shard_bytes=None):
    """One model.safetensors, or shards of at most `max_shard_bytes` with an index."""
    os.makedirs(directory, exist_ok=True)
    if max_shard_bytes is None:
        write_file(os.path.join(directory, "model.safetensors"), tensors)
        return
    shards, current, size = [], {}, 0
    for name in sorted(tensors):
        nbytes = len(_encode(*tensors[name]))
        if current and size + nbytes > max_shard_bytes:
            shards.append(current)
            current, size = {}, 0
        current[name] = tensors[name]
        size += nbytes
    shards.append(current)
    weight_map = {}
    for i, shard in enumerate(shards):
        file = "model-%05d-of-%05d.safetensors" % (i + 1, len(shards))
        write_file(os.path.join(directory, file), shard)
        for name in shard:
            weight_map[name] = file
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f, indent=2)
