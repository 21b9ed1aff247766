#!/usr/bin/env python3
"""Tensor/pipeline-parallel parity on the GPU machine: TP2, PP2 (and TP4, TP2xPP2 with 4 GPUs)
against one GPU, teacher-forced, in bf16 (and fp32 as a control); with --fp8 also FP8 weights and an FP8
KV cache (online quantization of the bf16 checkpoint, each rank quantizing its own shard).

For each model, `llm_cuda_logits` computes the logits of every position (prefill in chunks, the
last --decode tokens one per step through the CUDA-graph decode path) on one GPU, then under
`mpirun -np TP*PP` at each layout. Each layout's bf16 logits are compared with the one-GPU bf16
logits (top-1 agreement, per-position relative error) and with the one-GPU fp32 logits.

Models: the repository's trained model (launch/model) over its held-out text (real
distributions: a top-1 bar is meaningful there), the fixtures (random tiny models, reported), and
--extra DIRS (e.g. the 4-layer Llama-3-8B-shaped model hf_parity.py saves).

Exit status 1 when a layout's top-1 agreement with one GPU in bf16 is under --min-top1 (0.99) on
the trained model, its FP8 top-1 against fp32 is more than a point under one GPU's FP8, or its
fp32 relative error exceeds 1e-4 on any model.

  python3 benchmarks/cuda/parallel_parity.py --binary .device/bin/llm_cuda_logits --out parity.md
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


# What each compared format passes to llm_cuda_logits.
FORMAT_FLAGS = {
    "bf16": ["--dtype", "bf16"],
    "fp32": ["--dtype", "fp32"],
    "fp8": ["--dtype", "bf16", "--quantization", "fp8", "--kv-cache-dtype", "fp8"],
}


def run(binary, model, tokens_path, out_path, fmt, decode, tp, pp):
    n = tp * pp
    cmd = [binary, "--model", model, "--tokens", tokens_path, "--out", out_path] + FORMAT_FLAGS[fmt] + [
        "--decode", str(decode), "--chunk", "64", "--tp", str(tp), "--pp", str(pp)]
    if n > 1:
        env = ["-x", "NCCL_NVLS_ENABLE=0", "-x", "LD_LIBRARY_PATH"]
        if "LLM_CUSTOM_ALLREDUCE" in os.environ:
            env += ["-x", "LLM_CUSTOM_ALLREDUCE"]
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(n)] + env + cmd
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if res.returncode != 0:
        print(res.stdout + res.stderr, flush=True)
        raise RuntimeError("failed: " + " ".join(cmd))
    return res.stdout.strip().splitlines()[-1]


def make_llama3_shape(layers, path):
    """The first `layers` layers of the Llama-3-8B shape with random weights (norms randomized too),
    saved in bf16 as a Hugging Face checkpoint."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = json.load(open(os.path.join(HERE, "configs", "llama3-8b", "config.json")))
    cfg["num_hidden_layers"] = layers
    cfg.pop("architectures", None)
    cfg.pop("torch_dtype", None)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(LlamaConfig(**cfg))
        for mod in model.modules():
            if mod.__class__.__name__.endswith("RMSNorm"):
                torch.nn.init.uniform_(mod.weight, 0.5, 1.5)
    model.to(torch.bfloat16).save_pretrained(path, safe_serialization=True)
    del model
    torch.cuda.empty_cache()
    return path


def compare(got, ref):
    err = np.linalg.norm(got - ref, axis=-1) / np.maximum(np.linalg.norm(ref, axis=-1), 1e-30)
    top1 = float((got.argmax(-1) == ref.argmax(-1)).mean())
    return top1, float(err.max()), float(err.mean())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="build/bin/llm_cuda_logits")
    ap.add_argument("--gpus", type=int, default=0, help="GPUs to use (0: all visible)")
    ap.add_argument("--decode", type=int, default=32)
    ap.add_argument("--min-top1", type=float, default=0.99)
    ap.add_argument("--extra", nargs="*", default=[], help="more model folders (name=DIR or DIR)")
    ap.add_argument("--workdir", default="/tmp/parallel_parity")
    ap.add_argument("--llama3-layers", type=int, default=0,
                    help="also build (with transformers, random weights) and compare the first N layers of the "
                         "Llama-3-8B shape")
    ap.add_argument("--fp8", action="store_true", help="also compare FP8 weights + FP8 KV cache")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    formats = ["bf16", "fp32"] + (["fp8"] if args.fp8 else [])
    gpus = args.gpus
    if gpus == 0:
        gpus = int(subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.count("GPU "))
    layouts = [(2, 1), (1, 2)] if gpus >= 2 else []
    if gpus >= 4:
        layouts += [(4, 1), (2, 2)]
    os.makedirs(args.workdir, exist_ok=True)

    models = []
    trained = os.path.join(ROOT, "launch", "model")
    if os.path.exists(os.path.join(trained, "weights.tar.xz")):
        # The weights are kept compressed in the repository: assemble the model folder here.
        import shutil, tarfile
        assembled = os.path.join(args.workdir, "launch_model")
        os.makedirs(assembled, exist_ok=True)
        for f in os.listdir(trained):
            if f.endswith(".json") or f.endswith(".jinja"):
                shutil.copy(os.path.join(trained, f), assembled)
        with tarfile.open(os.path.join(trained, "weights.tar.xz")) as t:
            t.extractall(assembled)
        trained = assembled
    if os.path.exists(os.path.join(trained, "heldout_reference.json")):
        ids = json.load(open(os.path.join(trained, "heldout_reference.json")))["token_ids"]
        models.append(("launch/model (trained, held-out text)", trained, np.array(ids, dtype=np.int32), True, True))
    rng = np.random.default_rng(0)
    for name in ("llama-tiny", "llama3-tiny-bf16", "qwen2-tiny", "qwen3-tiny-fp16"):
        d = os.path.join(ROOT, "tests", "data", "models", name)
        vocab = json.load(open(os.path.join(d, "config.json")))["vocab_size"]
        # The fixtures stay in bf16/fp32: FP8 is compared on the real shapes and the trained model.
        models.append((f"{name} (random weights)", d, rng.integers(0, vocab, 160).astype(np.int32), False, False))
    if args.llama3_layers > 0:
        models.append((f"Llama-3-8B shape, {args.llama3_layers} layers (random weights)",
                       make_llama3_shape(args.llama3_layers, os.path.join(args.workdir, "llama3_shape")),
                       rng.integers(0, 128256, 256).astype(np.int32), False, True))
    for extra in args.extra:
        name, _, d = extra.rpartition("=")
        if not os.path.exists(os.path.join(d, "config.json")):
            print(f"skipping {d}: no config.json")
            continue
        vocab = json.load(open(os.path.join(d, "config.json")))["vocab_size"]
        models.append((name or d, d, rng.integers(0, vocab, 320).astype(np.int32), False, True))

    rows, failures = [], []
    for label, d, ids, gate, fp8_ok in models:
        model_formats = [f for f in formats if f != "fp8" or fp8_ok]
        tok = os.path.join(args.workdir, "tokens.i32")
        ids.tofile(tok)
        decode = min(args.decode, len(ids) - 1)
        ref = {}
        for dtype in model_formats:
            path = os.path.join(args.workdir, f"tp1_{dtype}.f32")
            run(args.binary, d, tok, path, dtype, decode, 1, 1)
            ref[dtype] = np.fromfile(path, dtype=np.float32).reshape(len(ids), -1)
        # One GPU's FP8 top-1 against fp32: what a layout's FP8 must come within a point of.
        fp8_bar = compare(ref["fp8"], ref["fp32"])[0] - 0.01 if "fp8" in model_formats else None
        for tp, pp in layouts:
            for dtype in model_formats:
                path = os.path.join(args.workdir, f"tp{tp}_pp{pp}_{dtype}.f32")
                line = run(args.binary, d, tok, path, dtype, decode, tp, pp)
                got = np.fromfile(path, dtype=np.float32).reshape(len(ids), -1)
                top1, max_err, mean_err = compare(got, ref[dtype])
                top1_fp32, max_fp32, _ = compare(got, ref["fp32"])
                ok = True
                if dtype == "fp32" and max_err > 1e-4:
                    ok = False
                if dtype == "bf16" and gate and top1 < args.min_top1:
                    ok = False
                # FP8 rounds each activation to 3 mantissa bits with a per-token scale taken over the
                # rank's own columns, so a TP layout is a different rounding of the same model, not the
                # same one: it must be as accurate as one GPU's FP8 (top-1 against fp32 within a point).
                if dtype == "fp8" and gate and top1_fp32 < fp8_bar:
                    ok = False
                rows.append((label, f"TP{tp} x PP{pp}", dtype, top1, max_err, mean_err, top1_fp32, max_fp32, ok))
                print(f"{label:42s} TP{tp}xPP{pp} {dtype}: top-1 vs 1 GPU {100 * top1:.2f}%  rel err max {max_err:.3g}"
                      f" mean {mean_err:.3g}  | vs 1-GPU fp32: top-1 {100 * top1_fp32:.2f}% max {max_fp32:.3g}"
                      f"  {'ok' if ok else 'FAIL'}  ({line})", flush=True)
                if not ok:
                    failures.append(f"{label} TP{tp}xPP{pp} {dtype}")

    lines = ["| model | layout | format | top-1 vs 1 GPU (same format) | max rel err | mean rel err | "
             "top-1 vs 1 GPU fp32 | max rel err vs fp32 | pass |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for label, layout, dtype, top1, max_err, mean_err, top1_fp32, max_fp32, ok in rows:
        lines.append(f"| {label} | {layout} | {dtype} | {100 * top1:.2f}% | {max_err:.3g} | {mean_err:.3g} | "
                     f"{100 * top1_fp32:.2f}% | {max_fp32:.3g} | {'yes' if ok else 'NO'} |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    if not layouts:
        print("parallel_parity: fewer than 2 GPUs: nothing compared")
        return 77
    if failures:
        print("FAILED: " + ", ".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
