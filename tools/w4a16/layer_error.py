"""Per-linear output error of 4-bit weights, round to nearest against GPTQ, on calibration inputs
and on held-out inputs: ||x·Wqᵀ - x·Wᵀ||² / ||x·Wᵀ||², x each linear's input in the float model.
A calibrated method that lowers the first far more than the second is fitting its calibration set
(too few tokens for the layer's inputs); benchmarks/RESULTS.md (4-bit accuracy) shows a use.

  python3 tools/w4a16/layer_error.py --model build/launch/model --calib-ids /tmp/w4eval/calib_ids.jsonl \\
      --heldout-ids /tmp/w4eval/heldout_ids.jsonl --calib-tokens 8192 --layers 2
(ids files: JSON lines of token ids, or of {"ids": [...]}, as tools/w4a16/eval_corpus.py writes.)
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import int4_formats as fmt  # noqa: E402
from gptq import gptq_quantize  # noqa: E402
from llama_numpy import Config, Model  # noqa: E402
from safetensors_io import read_checkpoint  # noqa: E402

INPUT_OF = {"self_attn.q_proj": "qkv", "self_attn.o_proj": "o", "mlp.gate_proj": "gate_up", "mlp.down_proj": "down"}


def sequences(path, tokens, length):
    """The first `length` tokens of each line's ids, until `tokens` in all."""
    out, total = [], 0
    with open(path) as f:
        for line in f:
            ids = json.loads(line)
            ids = (ids["ids"] if isinstance(ids, dict) else ids)[:min(length, tokens - total)]
            if len(ids) >= 8:
                out.append(ids)
                total += len(ids)
            if total >= tokens:
                break
    return out


def linear_inputs(model, seqs, layers):
    """[layer] -> {input name: [T, K]} over all sequences."""
    rec = [dict() for _ in range(layers)]
    for ids in seqs:
        h = model.embed(ids)
        pos = np.arange(len(ids), dtype=np.float64)
        for layer in range(layers):
            seen = {}
            h = model.layer_inputs(layer, h, pos, seen)
            for key, x in seen.items():
                rec[layer].setdefault(key, []).append(x)
    return [{key: np.concatenate(xs) for key, xs in r.items()} for r in rec]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--calib-ids", required=True)
    ap.add_argument("--heldout-ids", required=True)
    ap.add_argument("--calib-tokens", type=int, default=8192)
    ap.add_argument("--heldout-tokens", type=int, default=4096)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=2, help="the first N layers")
    ap.add_argument("--group", type=int, default=128)
    ap.add_argument("--damp", type=float, nargs="+", default=[0.01], help="GPTQ damping(s), of the mean diagonal")
    args = ap.parse_args()
    model = Model(Config.load(args.model), {k: v for k, (_, v) in read_checkpoint(args.model).items()})
    calib = linear_inputs(model, sequences(args.calib_ids, args.calib_tokens, args.seq_len), args.layers)
    held = linear_inputs(model, sequences(args.heldout_ids, args.heldout_tokens, args.seq_len), args.layers)
    print("calibration / held-out relative output error, symmetric g%d, GPTQ with act-order" % args.group)
    for layer in range(args.layers):
        for name, key in INPUT_OF.items():
            w = model.w["model.layers.%d.%s.weight" % (layer, name)]
            xc, xh = calib[layer][key], held[layer][key]

            def err(wq, x):
                ref = x @ w.T
                return np.sum((x @ wq.T - ref) ** 2) / np.sum(ref ** 2)

            g_idx = fmt.column_groups(w.shape[1], args.group)
            rtn = fmt.quantize_rtn(w, g_idx, args.group, "gptq_sym", "F16").dequantize()
            line = "layer %d %-16s RTN %.3e / %.3e" % (layer, name, err(rtn, xc), err(rtn, xh))
            for damp in args.damp:
                q = gptq_quantize(w, xc, args.group, True, True, "F16", damp=damp).dequantize()
                line += " | GPTQ damp %.2f %.3e / %.3e" % (damp, err(q, xc), err(q, xh))
            print(line, flush=True)


if __name__ == "__main__":
    main()
