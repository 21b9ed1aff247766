#!/usr/bin/env python3
"""Writes the 4-bit test fixtures (tests/data/models/*-w4-*): small random Llama / Qwen2 models
quantized by quantize.py into each published layout, and their references.

Each reference is computed from the checkpoint as written: its 4-bit tensors are read back and
dequantized by this folder's implementations of the producers' own readers (AutoAWQ's
dequantize_gemm, AutoGPTQ's torch dequantization, compressed-tensors' decompress), which must give
exactly the values the quantizer meant (checked here), and the float64 forward pass of
llama_numpy.py runs over those weights. expected.safetensors then holds, like the other fixtures,
for 4 prompts: prompt_i, prefill_logits_i [L, vocab] (float32), 24 greedy tokens greedy_i and the
logits that chose them greedy_logits_i. The models are drawn so that every greedy choice wins by a
clear margin (checked), so a float32 engine reproduces the tokens exactly.

Usage: python3 tools/w4a16/make_fixtures.py --out tests/data/models
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import int4_formats as fmt  # noqa: E402
from llama_numpy import Config, Model  # noqa: E402
from quantize import LINEARS, quantize_model  # noqa: E402
from safetensors_io import read_checkpoint, round_to, write_checkpoint, write_file  # noqa: E402

PROMPT_LENGTHS = [1, 7, 33, 80]
NEW_TOKENS = 24
MIN_GAP = 2e-3  # smallest top-1 / top-2 logit gap of any greedy choice

# name: architecture, layout and quantizer options. Shapes: hidden 128, 4 heads of 32, 2 KV heads,
# FFN 384, 3 layers, vocabulary 256 (qwen2: 260, q/k/v biases): K of 128 and 384, so groups of 32
# keep whole groups at TP 2 and 4, groups of 64 at TP 2 only.
FIXTURES = {
    "llama-w4-awq": dict(arch="llama", layout="awq", group=32, awq=True, dtype="F16"),
    "qwen2-w4-gptq-actorder": dict(arch="qwen2", layout="gptq", group=32, desc_act=True, dtype="F16"),
    "llama-w4-gptq-sym": dict(arch="llama", layout="gptq", group=64, sym=True, dtype="F16"),
    "llama-w4-ct": dict(arch="llama", layout="ct", group=32, sym=True, dtype="BF16"),
    "llama-w4-ct-asym-actorder": dict(arch="llama", layout="ct", group=32, desc_act=True, dtype="BF16"),
}


def make_config(arch, dtype):
    c = {"architectures": ["Qwen2ForCausalLM" if arch == "qwen2" else "LlamaForCausalLM"],
         "model_type": arch, "hidden_size": 128, "intermediate_size": 384, "num_hidden_layers": 3,
         "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "hidden_act": "silu",
         "max_position_embeddings": 512, "rms_norm_eps": 1e-5, "vocab_size": 260 if arch == "qwen2" else 256,
         "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": False,
         "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}, "attention_bias": False,
         "mlp_bias": False, "dtype": {"F16": "float16", "BF16": "bfloat16"}[dtype]}
    if arch == "qwen2":
        c["use_sliding_window"] = False
    return c


def random_weights(config, rng, dtype):
    c = Config(config)
    w = {}
    def mat(n, k):
        return rng.standard_normal((n, k)) / np.sqrt(k)
    w["model.embed_tokens.weight"] = rng.standard_normal((c.vocab, c.hidden))
    w["lm_head.weight"] = 4.0 * mat(c.vocab, c.hidden)  # wide logit gaps
    w["model.norm.weight"] = rng.uniform(0.8, 1.2, c.hidden)
    for l in range(c.layers):
        p = "model.layers.%d." % l
        w[p + "input_layernorm.weight"] = rng.uniform(0.8, 1.2, c.hidden)
        w[p + "post_attention_layernorm.weight"] = rng.uniform(0.8, 1.2, c.hidden)
        w[p + "self_attn.q_proj.weight"] = mat(c.heads * c.head_dim, c.hidden)
        w[p + "self_attn.k_proj.weight"] = mat(c.kv_heads * c.head_dim, c.hidden)
        w[p + "self_attn.v_proj.weight"] = mat(c.kv_heads * c.head_dim, c.hidden)
        w[p + "self_attn.o_proj.weight"] = mat(c.hidden, c.heads * c.head_dim)
        w[p + "mlp.gate_proj.weight"] = mat(c.ffn, c.hidden)
        w[p + "mlp.up_proj.weight"] = mat(c.ffn, c.hidden)
        w[p + "mlp.down_proj.weight"] = mat(c.hidden, c.ffn)
        if c.qkv_bias:
            for t, n in (("q", c.heads), ("k", c.kv_heads), ("v", c.kv_heads)):
                w[p + "self_attn.%s_proj.bias" % t] = rng.uniform(-0.2, 0.2, n * c.head_dim)
    return {k: (dtype, round_to(dtype, v)) for k, v in w.items()}


def read_back(directory, spec):
    """The checkpoint's weights as float64, its 4-bit linears dequantized by the producers' readers."""
    t = read_checkpoint(directory)
    with open(os.path.join(directory, "config.json")) as f:
        q = json.load(f)["quantization_config"]
    weights = {}
    for name, (_, arr) in t.items():
        if not name.endswith((".qweight", ".qzeros", ".scales", ".g_idx", ".weight_packed", ".weight_scale",
                              ".weight_zero_point", ".weight_g_idx", ".weight_shape")):
            weights[name] = arr.astype(np.float64)
    group = spec["group"]
    for name in t:
        if name.endswith(".qweight") and spec["layout"] == "awq":
            base = name[:-len(".qweight")]
            weights[base + ".weight"] = fmt.dequantize_awq(t[name][1], t[base + ".qzeros"][1], t[base + ".scales"][1],
                                                           q["group_size"])
        elif name.endswith(".qweight"):
            base = name[:-len(".qweight")]
            weights[base + ".weight"] = fmt.dequantize_gptq(t[name][1], t[base + ".qzeros"][1], t[base + ".scales"][1],
                                                            t[base + ".g_idx"][1], v1=q["checkpoint_format"] == "gptq")
        elif name.endswith(".weight_packed"):
            base = name[:-len(".weight_packed")]
            zp = t.get(base + ".weight_zero_point")
            gi = t.get(base + ".weight_g_idx")
            weights[base + ".weight"] = fmt.dequantize_ct(t[name][1], t[base + ".weight_scale"][1],
                                                          None if zp is None else zp[1], None if gi is None else gi[1],
                                                          t[base + ".weight_shape"][1], group)
    return weights


def build(name, spec, out_dir, seed):
    config = make_config(spec["arch"], spec["dtype"])
    for attempt in range(20):
        rng = np.random.default_rng(seed + 1000 * attempt)
        with tempfile.TemporaryDirectory() as src:
            with open(os.path.join(src, "config.json"), "w") as f:
                json.dump(config, f)
            write_checkpoint(src, random_weights(config, rng, spec["dtype"]))
            calib = [list(rng.integers(1, config["vocab_size"], 64)) for _ in range(4)] if spec.get("awq") else None
            target = os.path.join(out_dir, name)
            shutil.rmtree(target, ignore_errors=True)
            quantize_model(src, target, spec["layout"], spec["group"], sym=spec.get("sym", False),
                           desc_act=spec.get("desc_act", False), awq=spec.get("awq", False), calib=calib, seed=seed,
                           log=lambda s: None, keep_dtype=spec["dtype"])
            original = {k: v for k, (_, v) in read_checkpoint(src).items()}
        weights = read_back(target, spec)
        # The readers give back values close to the float weights (4-bit rounding, AWQ's exact
        # rescaling aside): a packing or order error would be far off.
        for l in range(config["num_hidden_layers"]):
            for lin in LINEARS:
                key = "model.layers.%d.%s.weight" % (l, lin)
                err = np.linalg.norm(weights[key] - original[key]) / np.linalg.norm(original[key])
                if not spec.get("awq") and err > 0.2:
                    raise SystemExit("%s %s: dequantized weights %.3f away from the float ones" % (name, key, err))
        model = Model(Config(config), weights)
        prompts = [list(rng.integers(1, config["vocab_size"], n)) for n in PROMPT_LENGTHS]
        expected, min_gap = {}, np.inf
        for i, prompt in enumerate(prompts):
            greedy, logits, gap = model.greedy(prompt, NEW_TOKENS)
            min_gap = min(min_gap, gap)
            expected["prompt_%d" % i] = ("I32", np.array(prompt, dtype=np.int32))
            expected["prefill_logits_%d" % i] = ("F32", model.logits(prompt).astype(np.float32))
            expected["greedy_%d" % i] = ("I32", np.array(greedy, dtype=np.int32))
            expected["greedy_logits_%d" % i] = ("F32", logits.astype(np.float32))
        if min_gap >= MIN_GAP:
            break
        print("%s: seed %d gives a top-1 gap of %.2g; drawing again" % (name, seed + 1000 * attempt, min_gap))
    else:
        raise SystemExit("%s: no draw with wide enough greedy gaps" % name)
    write_file(os.path.join(target, "expected.safetensors"), expected)
    with open(os.path.join(target, "expected.json"), "w") as f:
        json.dump({"generator": "tools/w4a16/make_fixtures.py", "seed": seed + 1000 * attempt, "spec": spec,
                   "reference_math": "float64 numpy forward over the weights dequantized by the producers' readers "
                                     "(tools/w4a16/int4_formats.py), logits stored as float32",
                   "min_greedy_gap": float(min_gap), "prompt_lengths": PROMPT_LENGTHS, "greedy_new_tokens": NEW_TOKENS},
                  f, indent=1)
    with open(os.path.join(target, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 1, "eos_token_id": 2}, f)
    print("%s: min greedy gap %.3g" % (name, min_gap))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args()
    for i, (name, spec) in enumerate(FIXTURES.items()):
        if args.only and name not in args.only:
            continue
        build(name, spec, args.out, seed=17 + i)


if __name__ == "__main__":
    main()
