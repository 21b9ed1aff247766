#!/usr/bin/env python3
"""Quantizes a float Llama-family checkpoint to 4-bit weights (W4A16) and writes it in one of the
published layouts, packed the way its producer packs it (see int4_formats.py):

  awq    AutoAWQ GEMM (quant_method awq, version gemm, zero points), fp16 scales
  gptq   GPTQ (AutoGPTQ v1 format, or GPTQModel's gptq_v2 with --gptq-v2), sym or asym, optional
         desc_act (act-order: columns grouped by decreasing calibration activation energy, the
         Hessian diagonal GPTQ sorts by; random without calibration data)
  ct     compressed-tensors pack-quantized (llm-compressor's W4A16), sym or asym, optional
         actorder group

Weights are rounded to nearest per group (RTN), or with --gptq by GPTQ's error feedback (gptq.py;
--mse: each group's range searched as GPTQ's quantizer does with its mse option).
With --awq-search and calibration token ids, the
activation-aware pass of AutoAWQ runs first (awq/quantize/quantizer.py: per-channel scales
s = mean|x|^r / mean|w|^(1-r), r searched on a grid of 20 to minimise the quantized linears' output
error, folded into the preceding RMSNorm or up_proj; then a per-group clipping search), so that the
quantized model computes the same function as the float one up to the 4-bit rounding. Any
quantization goes into any layout (AWQ's has no act-order).

Usage:
  python3 tools/w4a16/quantize.py --model build/launch/model --out /tmp/m-awq --layout awq --group 128 \
      [--awq-search --calib-ids ids.jsonl] [--sym] [--desc-act] [--gptq-v2] [--shard-mb 16]
Calibration ids: one JSON list of token ids per line, e.g. from
  build/bin/llm tokenize --tokenizer build/launch/model/tokenizer.json --jsonl texts.jsonl
(texts.jsonl: one JSON string per line).
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import int4_formats as fmt  # noqa: E402
from gptq import gptq_quantize  # noqa: E402
from llama_numpy import Config, Model, rms_norm  # noqa: E402
from safetensors_io import read_checkpoint, round_to, write_checkpoint  # noqa: E402

LINEARS = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
           "mlp.up_proj", "mlp.down_proj"]
COPIED_FILES = ["tokenizer.json", "tokenizer_config.json", "generation_config.json", "chat_template.jinja",
                "chat_template.json", "special_tokens_map.json"]


def style_of(layout, sym):
    if layout == "awq":
        return "awq"
    return ("gptq_" if layout == "gptq" else "ct_") + ("sym" if sym else "asym")


# --- AutoAWQ's activation-aware scaling (awq/quantize/quantizer.py _search_best_scale, auto_clip) ---

def pseudo_quantize(w, group, style, scale_dtype):
    g_idx = fmt.column_groups(w.shape[1], group)
    return fmt.quantize_rtn(w, g_idx, group, style, scale_dtype).dequantize()


def search_scale(x, weights, group, style, scale_dtype):
    """Per-input-channel scales for the linears `weights` (sharing input x [T, K])."""
    w = np.concatenate(weights, axis=0)
    k = w.shape[1]
    g = group if group > 0 else k
    wg = np.abs(w).reshape(-1, g)
    w_mean = (wg / (wg.max(axis=1, keepdims=True) + 1e-6)).reshape(w.shape).mean(axis=0)
    x_mean = np.abs(x).mean(axis=0)
    ref = x @ w.T
    best, best_err = np.ones(k), np.inf
    for i in range(20):
        r = i / 20
        s = np.maximum(x_mean ** r / (w_mean ** (1 - r) + 1e-4), 1e-4)
        s = s / np.sqrt(s.max() * s.min())
        wq = pseudo_quantize(w * s, group, style, scale_dtype) / s
        err = np.mean((x @ wq.T - ref) ** 2)
        if err < best_err:
            best, best_err = s, err
    return best


def search_clip(x, w, group, style, scale_dtype, grid=10, max_shrink=0.5, tokens=256):
    """Per (row, group) ratios of the weight's range to keep (AutoAWQ's _compute_best_clip)."""
    n, k = w.shape
    g = group if group > 0 else k
    x = x[np.linspace(0, len(x) - 1, min(tokens, len(x))).astype(int)]
    groups = k // g
    best = np.ones((n, groups))
    for gi in range(groups):
        cols = slice(gi * g, (gi + 1) * g)
        wg, xg = w[:, cols], x[:, cols]
        ref = xg @ wg.T  # [T, N]: this group's part of every output
        best_err = np.full(n, np.inf)
        for i in range(int(grid * max_shrink)):
            ratio = 1 - i / grid
            q = fmt.quantize_rtn(wg, np.zeros(g, dtype=np.int64), 0, style, scale_dtype,
                                 clip=np.full((n, 1), ratio)).dequantize()
            err = np.mean((xg @ q.T - ref) ** 2, axis=0)
            better = err < best_err
            best_err[better] = err[better]
            best[better, gi] = ratio
    return best


def awq_search(model, calib, group, style, scale_dtype, log):
    """Scales folded into the float weights (an exact rewrite of the model) and clip ratios per
    linear, layer by layer, each layer's inputs computed by the already rewritten layers."""
    c, w = model.c, model.w
    clips = {}
    hs = [model.embed(ids) for ids in calib]
    for layer in range(c.layers):
        p = "model.layers.%d." % layer
        recs = []
        for h in hs:
            rec = {}
            model.layer_inputs(layer, h, np.arange(len(h), dtype=np.float64), rec)
            recs.append(rec)
        cat = {key: np.concatenate([r[key] for r in recs]) for key in recs[0]}
        # q/k/v: scale folded into input_layernorm.
        names = [p + "self_attn.%s_proj.weight" % t for t in "qkv"]
        s = search_scale(cat["qkv"], [w[nm] for nm in names], group, style, scale_dtype)
        w[p + "input_layernorm.weight"] = w[p + "input_layernorm.weight"] / s
        for nm in names:
            w[nm] = w[nm] * s
        # o_proj through v_proj only when they have one shape (MHA); GQA skips it, as AutoAWQ does.
        if c.heads == c.kv_heads:
            s = search_scale(cat["o"], [w[p + "self_attn.o_proj.weight"]], group, style, scale_dtype)
            w[p + "self_attn.v_proj.weight"] = w[p + "self_attn.v_proj.weight"] / s[:, None]
            w[p + "self_attn.o_proj.weight"] = w[p + "self_attn.o_proj.weight"] * s
        # gate/up: folded into post_attention_layernorm.
        names = [p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"]
        s = search_scale(cat["gate_up"], [w[nm] for nm in names], group, style, scale_dtype)
        w[p + "post_attention_layernorm.weight"] = w[p + "post_attention_layernorm.weight"] / s
        for nm in names:
            w[nm] = w[nm] * s
        # down: folded into up_proj's rows (silu(gate) * up is linear in up).
        s = search_scale(cat["down"], [w[p + "mlp.down_proj.weight"]], group, style, scale_dtype)
        w[p + "mlp.up_proj.weight"] = w[p + "mlp.up_proj.weight"] / s[:, None]
        w[p + "mlp.down_proj.weight"] = w[p + "mlp.down_proj.weight"] * s
        # The inputs again, through the rewritten layer (same function), for clipping and the next layer.
        recs = []
        nxt = []
        for h in hs:
            rec = {}
            nxt.append(model.layer_inputs(layer, h, np.arange(len(h), dtype=np.float64), rec))
            recs.append(rec)
        cat = {key: np.concatenate([r[key] for r in recs]) for key in recs[0]}
        # Clipping: not for q and k, whose outputs go through the softmax (AutoAWQ skips them too).
        for name, key in [("self_attn.v_proj", "qkv"), ("self_attn.o_proj", "o"), ("mlp.gate_proj", "gate_up"),
                          ("mlp.up_proj", "gate_up"), ("mlp.down_proj", "down")]:
            clips[p + name] = search_clip(cat[key], w[p + name + ".weight"], group, style, scale_dtype)
        hs = nxt
        log("awq: layer %d scaled and clipped" % layer)
    return clips


def act_order(model, calib, layer, key, k, seed):
    """Columns by decreasing sum of x^2 over the calibration tokens (GPTQ's Hessian diagonal), or a
    seeded random order without calibration."""
    if not calib:
        return np.random.default_rng(seed).permutation(k)
    energy = np.zeros(k)
    for ids in calib:
        h = model.embed(ids)
        pos = np.arange(len(ids), dtype=np.float64)
        for l in range(layer):
            h = model.layer_inputs(l, h, pos)
        rec = {}
        model.layer_inputs(layer, h, pos, rec)
        energy += (rec[key] ** 2).sum(axis=0)
    return np.argsort(-energy, kind="stable")


def quantize_model(src, out, layout, group, sym=False, desc_act=False, gptq_v2=False, awq=False, calib=None,
                   shard_mb=None, seed=0, log=print, keep_dtype=None, gptq=False, mse=False):
    with open(os.path.join(src, "config.json")) as f:
        config = json.load(f)
    c = Config(config)
    tensors = read_checkpoint(src)
    float_dtype = keep_dtype or ("F16" if layout in ("awq", "gptq") else
                                 next(d for d, _ in tensors.values() if d in ("BF16", "F16", "F32")))
    model = Model(c, {k: v for k, (_, v) in tensors.items()})
    style = style_of(layout, sym)
    scale_dtype = "F16" if layout in ("awq", "gptq") else float_dtype
    clips = awq_search(model, calib, group, style, scale_dtype, log) if awq else {}
    order_cache = {}
    out_tensors = {}
    # GPTQ: layer by layer, each layer's inputs computed through the layers already quantized.
    hidden = [model.embed(ids) for ids in calib] if gptq else None
    for name, (dtype, _) in tensors.items():
        if any(name.endswith(l + ".weight") for l in LINEARS):
            continue
        out_tensors[name] = (float_dtype, round_to(float_dtype, model.w[name]))
    for layer in range(c.layers):
        inputs = None
        if gptq:
            recs = []
            for h in hidden:
                rec = {}
                model.layer_inputs(layer, h, np.arange(len(h), dtype=np.float64), rec)
                recs.append(rec)
            inputs = {key: np.concatenate([r[key] for r in recs]) for key in recs[0]}
        dequantized = {}
        for lin in LINEARS:
            base = "model.layers.%d.%s" % (layer, lin)
            w = model.w[base + ".weight"]
            n, k = w.shape
            order = None
            if gptq:
                key = {"q": "qkv", "k": "qkv", "v": "qkv", "o": "o", "g": "gate_up", "u": "gate_up",
                       "d": "down"}[lin.split(".")[1][0]]
                qz = gptq_quantize(w, inputs[key], group, sym and layout != "awq",
                                   desc_act and layout != "awq" and group > 0, scale_dtype, mse=mse)
                if desc_act and layout != "awq" and group > 0:
                    order = np.argsort(qz.g_idx, kind="stable")
            elif desc_act and group > 0:
                key = {"q": "qkv", "k": "qkv", "v": "qkv", "o": "o", "g": "gate_up", "u": "gate_up",
                       "d": "down"}[lin.split(".")[1][0]]
                if (layer, key) not in order_cache:  # one order per input: fused parts share g_idx
                    order_cache[(layer, key)] = act_order(model, calib, layer, key, k, seed + 97 * layer + len(key))
                order = order_cache[(layer, key)]
            if not gptq:
                g_idx = fmt.column_groups(k, group, order)
                clip = clips.get(base)
                if clip is not None and order is not None:
                    clip = None  # clip ratios are per column-order group
                qz = fmt.quantize_rtn(w, g_idx, group, style, scale_dtype, clip=clip)
            meant = qz.dequantize()
            dequantized[base + ".weight"] = meant
            if layout == "awq":
                qweight, qzeros, scales = fmt.pack_awq(qz)
                read = fmt.dequantize_awq(qweight, qzeros, scales, group)
                out_tensors[base + ".qweight"] = ("I32", qweight)
                out_tensors[base + ".qzeros"] = ("I32", qzeros)
                out_tensors[base + ".scales"] = ("F16", scales)
            elif layout == "gptq":
                qweight, qzeros, scales, gi = fmt.pack_gptq(qz, v1=not gptq_v2)
                read = fmt.dequantize_gptq(qweight, qzeros, scales, gi, v1=not gptq_v2)
                out_tensors[base + ".qweight"] = ("I32", qweight)
                out_tensors[base + ".qzeros"] = ("I32", qzeros)
                out_tensors[base + ".scales"] = ("F16", scales)
                out_tensors[base + ".g_idx"] = ("I32", gi)
            else:
                packed, scale, zp, gi, shape = fmt.pack_ct(qz, symmetric=sym)
                read = fmt.dequantize_ct(packed, scale, zp, gi if order is not None else None, shape, group)
                out_tensors[base + ".weight_packed"] = ("I32", packed)
                out_tensors[base + ".weight_scale"] = (scale_dtype, scale)
                out_tensors[base + ".weight_shape"] = ("I64", shape)
                if zp is not None:
                    out_tensors[base + ".weight_zero_point"] = ("I32", zp)
                if order is not None:
                    out_tensors[base + ".weight_g_idx"] = ("I32", gi)
            # The producer's reader must give back exactly the values quantized (AutoGPTQ's v1
            # zeros of 0 would not: they overflow its 4-bit field).
            if not np.array_equal(read, meant):
                raise SystemExit("%s: the %s reader decodes other values than were packed" % (base, layout))
            bias = base + ".bias"
            if bias in model.w:
                out_tensors[bias] = (float_dtype, round_to(float_dtype, model.w[bias]))
        if gptq:  # the next layers see this one quantized
            model.w.update(dequantized)
            hidden = [model.layer_inputs(layer, h, np.arange(len(h), dtype=np.float64)) for h in hidden]
        log("quantized layer %d" % layer)
    config["quantization_config"] = quantization_config(layout, group, sym, desc_act, gptq_v2)
    config.pop("torch_dtype", None)
    config["dtype"] = {"F16": "float16", "BF16": "bfloat16", "F32": "float32"}[float_dtype]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    for name in COPIED_FILES:
        if os.path.exists(os.path.join(src, name)):
            shutil.copy(os.path.join(src, name), os.path.join(out, name))
    write_checkpoint(out, out_tensors, None if shard_mb is None else int(shard_mb * (1 << 20)))
    return out_tensors


def quantization_config(layout, group, sym, desc_act, gptq_v2):
    if layout == "awq":  # transformers' AwqConfig as AutoAWQ writes it
        return {"quant_method": "awq", "bits": 4, "group_size": group if group > 0 else -1, "zero_point": True,
                "version": "gemm", "modules_to_not_convert": None}
    if layout == "gptq":  # AutoGPTQ's BaseQuantizeConfig (GPTQModel adds format / pack_dtype)
        fmt_name = "gptq_v2" if gptq_v2 else "gptq"
        return {"quant_method": "gptq", "bits": 4, "group_size": group if group > 0 else -1, "desc_act": desc_act,
                "sym": sym, "static_groups": False, "true_sequential": True, "damp_percent": 0.01,
                "checkpoint_format": fmt_name, "format": fmt_name, "pack_dtype": "int32", "lm_head": False}
    weights = {"num_bits": 4, "type": "int", "symmetric": sym, "dynamic": False, "observer": "minmax",
               "strategy": "group" if group > 0 else "channel", "group_size": group if group > 0 else None,
               "actorder": "group" if desc_act else None, "block_structure": None}
    return {"quant_method": "compressed-tensors", "format": "pack-quantized", "quantization_status": "compressed",
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights, "input_activations": None,
                                          "output_activations": None}},
            "ignore": ["lm_head"], "kv_cache_scheme": None, "sparsity_config": {}}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--layout", choices=["awq", "gptq", "ct"], required=True)
    ap.add_argument("--group", type=int, default=128, help="columns per group (-1: one group)")
    ap.add_argument("--sym", action="store_true", help="gptq / ct: symmetric (zero 8)")
    ap.add_argument("--desc-act", action="store_true", help="gptq desc_act / ct actorder group")
    ap.add_argument("--gptq-v2", action="store_true", help="GPTQModel's gptq_v2 zeros")
    ap.add_argument("--awq-search", action="store_true", help="AutoAWQ's activation-aware scales and clipping")
    ap.add_argument("--gptq", action="store_true", help="GPTQ's error feedback instead of round to nearest")
    ap.add_argument("--mse", action="store_true",
                    help="with --gptq: each group's range shrunk to minimise its rounding error (GPTQ's mse option)")
    ap.add_argument("--calib-ids", help="JSON lines of token ids")
    ap.add_argument("--calib-tokens", type=int, default=4096, help="calibration tokens to use")
    ap.add_argument("--shard-mb", type=float)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    calib = []
    if args.calib_ids:
        total = 0
        with open(args.calib_ids) as f:
            for line in f:
                ids = json.loads(line)
                ids = ids["ids"] if isinstance(ids, dict) else ids
                ids = ids[:512]
                if len(ids) < 8:
                    continue
                calib.append(ids)
                total += len(ids)
                if total >= args.calib_tokens:
                    break
    if args.mse and not args.gptq:
        sys.exit("--mse is GPTQ's range search: it needs --gptq")
    if (args.awq_search or args.gptq) and not calib:
        sys.exit("--awq-search and --gptq need --calib-ids")
    group = args.group if args.group > 0 else 0
    quantize_model(args.model, args.out, args.layout, group, args.sym, args.desc_act, args.gptq_v2,
                   args.awq_search, calib, args.shard_mb, args.seed, log=lambda s: print(s, file=sys.stderr),
                   gptq=args.gptq, mse=args.mse)


if __name__ == "__main__":
    main()
