#!/usr/bin/env python3
"""Parity of the CUDA backend against Hugging Face transformers on a real model shape.

Builds the first N layers of a Llama-3-8B-shaped model (hidden 4096, 32/8 heads, ffn 14336,
vocab 128256, llama3 rope scaling) with random weights (transformers' own init, RMSNorm weights
randomized too so a skipped norm shows), saves it with save_pretrained, and compares the
teacher-forced logits of our binary (llm_cuda_logits: prefill in chunks + the last tokens through
the CUDA-graph decode path) with transformers' float32 logits over the same bf16 weights.
Also reports transformers' own bf16 run against the same float32 reference, as the yardstick
for what bf16 arithmetic costs.

Runs on the GPU machine: python3 benchmarks/cuda/hf_parity.py --binary .device/bin/llm_cuda_logits
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))


def rel_err_rows(a, b):
    """Per-row ||a - b|| / ||b||."""
    return torch.linalg.vector_norm(a - b, dim=-1) / torch.linalg.vector_norm(b, dim=-1).clamp_min(1e-30)


def compare(name, got, ref):
    err = rel_err_rows(got, ref)
    top1 = (got.argmax(-1) == ref.argmax(-1)).float().mean().item()
    return {"name": name, "max_rel_err": err.max().item(), "mean_rel_err": err.mean().item(), "top1": top1}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="build-cuda/bin/llm_cuda_logits")
    ap.add_argument("--config", default=os.path.join(HERE, "configs", "llama3-8b", "config.json"))
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=320)
    ap.add_argument("--decode", type=int, default=32)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--out", default=None, help="markdown summary")
    args = ap.parse_args()

    cfg = json.load(open(args.config))
    cfg["num_hidden_layers"] = args.layers
    cfg.pop("architectures", None)
    cfg.pop("torch_dtype", None)
    config = LlamaConfig(**cfg)
    torch.manual_seed(0)
    t0 = time.time()
    with torch.device("cuda"):
        model = LlamaForCausalLM(config)
        for mod in model.modules():  # transformers initializes RMSNorm weights to 1
            if mod.__class__.__name__.endswith("RMSNorm"):
                torch.nn.init.uniform_(mod.weight, 0.5, 1.5)
    model = model.to(torch.bfloat16).eval()
    work = args.workdir or tempfile.mkdtemp(prefix="hf_parity_")
    model.save_pretrained(work, safe_serialization=True)
    print(f"model: {args.layers} layers of the Llama-3-8B shape, saved to {work} in {time.time() - t0:.1f} s",
          flush=True)

    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, config.vocab_size, (args.tokens,), generator=gen, dtype=torch.int64)
    # The reference is the checkpoint as saved and as the engine reads it: reloaded from disk, not
    # the in-memory model built from the config dict (whose old-style `rope_scaling` key the
    # in-memory rotary embedding may not apply as the saved `rope_parameters` say).
    del model
    from transformers import AutoModelForCausalLM
    with torch.no_grad():
        model = AutoModelForCausalLM.from_pretrained(work, dtype=torch.bfloat16).cuda().eval()
        hf_bf16 = model(ids[None].cuda()).logits[0].float()
        model = model.float()  # the same (bf16-rounded) weights, float32 arithmetic
        ref = model(ids[None].cuda()).logits[0].float()
    del model
    torch.cuda.empty_cache()

    tok_path = os.path.join(work, "tokens.i32")
    ids.to(torch.int32).numpy().tofile(tok_path)
    rows = []
    for dtype in ("bf16", "fp32"):
        out_path = os.path.join(work, f"logits_{dtype}.f32")
        t1 = time.time()
        cmd = [args.binary, "--model", work, "--tokens", tok_path, "--out", out_path, "--dtype", dtype,
               "--decode", str(args.decode), "--chunk", "128"]
        res = subprocess.run(cmd, capture_output=True, text=True)
        print(res.stdout + res.stderr, flush=True)
        if res.returncode != 0:
            print(f"FAILED: {' '.join(cmd)}", flush=True)
            sys.exit(1)
        ours = torch.from_numpy(np.fromfile(out_path, dtype=np.float32).reshape(args.tokens, -1)).cuda()
        prefill = args.tokens - args.decode
        rows.append(compare(f"ours {dtype}, all positions", ours, ref))
        rows.append(compare(f"ours {dtype}, prefill positions", ours[:prefill], ref[:prefill]))
        rows.append(compare(f"ours {dtype}, decode positions (graphs)", ours[prefill:], ref[prefill:]))
        print(f"{dtype}: ran in {time.time() - t1:.1f} s", flush=True)
    rows.append(compare("transformers bf16 (yardstick)", hf_bf16, ref))

    lines = [
        f"Reference: transformers {__import__('transformers').__version__} / torch {torch.__version__}, float32 on "
        f"{torch.cuda.get_device_name()}, over the same bf16 weights; {args.layers} layers of the Llama-3-8B shape "
        f"(vocab {config.vocab_size}, llama3 rope), {args.tokens} random tokens teacher-forced, the last "
        f"{args.decode} through the decode path.",
        "",
        "| run | max rel err (per position) | mean rel err | top-1 agreement |",
        "| --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(f"| {r['name']} | {r['max_rel_err']:.3g} | {r['mean_rel_err']:.3g} | {100 * r['top1']:.2f}% |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
