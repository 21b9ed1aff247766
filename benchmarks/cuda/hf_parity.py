#!/usr/bin/env python3
"""Parity of the CUDA backend against Hugging Face transformers on a real model shape.

Builds the first N layers of a Llama-3-8B-shaped model (hidden 4096, 32/8 heads, ffn 14336,
vocab 128256, llama3 rope scaling) with random weights (transformers' own init, RMSNorm weights
randomized too so a skipped norm shows), saves it with save_pretrained, and compares the
teacher-forced logits of our binary (llm_cuda_logits: prefill in chunks + the last tokens through
the CUDA-graph decode path) with transformers' float32 logits over the same bf16 weights.
Also reports transformers' own bf16 run against the same float32 reference, as the yardstick
for what bf16 arithmetic costs.

--fp8: the same model written as a block-scaled FP8 checkpoint (transformers' layout: `weight`
F8_E4M3 and `weight_scale_inv` F32 per 128 x 128 block, `quant_method: fp8`), every decoder linear
quantized (round to nearest of weight / (block amax / 448)); the reference is transformers'
float32 forward over the dequantized weights, our binary reads the FP8 checkpoint (FP8 weights,
activations quantized as the engine does), and transformers' own run of the FP8 checkpoint is
the yardstick where it can run it.

Runs on the GPU machine: python3 benchmarks/cuda/hf_parity.py --binary .device/bin/llm_cuda_logits [--fp8]
"""
import argparse
import gc
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


FP8_BLOCK = 128
FP8_MAX = 448.0
FP8_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def quantize_block_fp8(w):
    """(E4M3 weight, float32 scale_inv [ceil(N/128), ceil(K/128)], float32 dequantized weight)."""
    n, k = w.shape
    bn, bk = -(-n // FP8_BLOCK), -(-k // FP8_BLOCK)
    wf = torch.zeros(bn * FP8_BLOCK, bk * FP8_BLOCK, dtype=torch.float32, device=w.device)
    wf[:n, :k] = w.float()
    blocks = wf.view(bn, FP8_BLOCK, bk, FP8_BLOCK)
    amax = blocks.abs().amax(dim=(1, 3)).clamp_min(1e-12)
    scale = amax / FP8_MAX
    q = (blocks / scale[:, None, :, None]).to(torch.float8_e4m3fn)
    deq = (q.float() * scale[:, None, :, None]).view(bn * FP8_BLOCK, bk * FP8_BLOCK)[:n, :k]
    return q.view(bn * FP8_BLOCK, bk * FP8_BLOCK)[:n, :k].contiguous(), scale.contiguous(), deq.contiguous()


def quantize_activations_hook(module, inputs):
    """A linear's input rounded as the block-FP8 recipe quantizes it (dynamic, per token and group
    of 128 columns, E4M3, scale amax / 448), back in float32."""
    (x,) = inputs
    k = x.shape[-1]
    g = x.reshape(-1, k // FP8_BLOCK, FP8_BLOCK)
    scale = (g.abs().amax(dim=-1, keepdim=True) / FP8_MAX).clamp_min(1e-12)
    q = (g / scale).to(torch.float8_e4m3fn).float() * scale
    return (q.reshape(x.shape),)


def write_fp8_checkpoint(src, dst):
    """The bf16 checkpoint in `src` rewritten to `dst` with block-FP8 decoder linears; returns
    {weight name: float32 dequantized weight}."""
    from safetensors.torch import load_file, save_file
    os.makedirs(dst, exist_ok=True)
    tensors = {}
    for f in sorted(os.listdir(src)):
        if f.endswith(".safetensors"):
            tensors.update(load_file(os.path.join(src, f), device="cuda"))
    out, deq = {}, {}
    for name, t in tensors.items():
        if name.endswith(".weight") and name.split(".")[-2] in FP8_LINEARS:
            q, scale, d = quantize_block_fp8(t)
            out[name] = q.cpu()
            out[name + "_scale_inv"] = scale.cpu()
            deq[name] = d
        else:
            out[name] = t.cpu()
    save_file(out, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    cfg = json.load(open(os.path.join(src, "config.json")))
    cfg["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "dynamic",
                                  "weight_block_size": [FP8_BLOCK, FP8_BLOCK]}
    json.dump(cfg, open(os.path.join(dst, "config.json"), "w"), indent=2)
    return deq


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="build-cuda/bin/llm_cuda_logits")
    ap.add_argument("--config", default=os.path.join(HERE, "configs", "llama3-8b", "config.json"))
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=320)
    ap.add_argument("--decode", type=int, default=32)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--out", default=None, help="markdown summary")
    ap.add_argument("--fp8", action="store_true", help="a block-FP8 checkpoint of the same model")
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
    hf_note = ""
    if args.fp8:
        src, work = work, work + "_fp8"
        deq = write_fp8_checkpoint(src, work)
        with torch.no_grad():
            model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).cuda().eval()
            for name, mod in model.named_modules():
                if name + ".weight" in deq:
                    mod.weight.data.copy_(deq[name + ".weight"])
            ref = model(ids[None].cuda()).logits[0].float()  # float32 over the dequantized weights
            # ... and with the linears' inputs rounded as the recipe's dynamic activation
            # quantization rounds them (what W8A8 kernels compute).
            for name, mod in model.named_modules():
                if name + ".weight" in deq:
                    mod.register_forward_pre_hook(quantize_activations_hook)
            ref_act = model(ids[None].cuda()).logits[0].float().cpu()
            del model
            del deq
        hf_bf16 = None  # transformers' own FP8 run, after ours (a failed load can hold GPU memory)
    else:
        with torch.no_grad():
            model = AutoModelForCausalLM.from_pretrained(work, dtype=torch.bfloat16).cuda().eval()
            hf_bf16 = model(ids[None].cuda()).logits[0].float()
            model = model.float()  # the same (bf16-rounded) weights, float32 arithmetic
            ref = model(ids[None].cuda()).logits[0].float()
        del model
    # Our binary's arena takes 90% of the device: hand back everything this process cached (the
    # failed FP8 load above can leave tensors in reference cycles until collected).
    ref = ref.cpu()
    hf_bf16 = hf_bf16.cpu() if hf_bf16 is not None else None
    gc.collect()
    torch.cuda.empty_cache()
    print(f"this process holds {torch.cuda.memory_reserved() / 2**30:.2f} GiB of the GPU", flush=True)

    tok_path = os.path.join(work, "tokens.i32")
    ids.to(torch.int32).numpy().tofile(tok_path)
    rows = []
    for dtype in ("bf16",) if args.fp8 else ("bf16", "fp32"):
        out_path = os.path.join(work, f"logits_{dtype}.f32")
        t1 = time.time()
        cmd = [args.binary, "--model", work, "--tokens", tok_path, "--out", out_path, "--dtype", dtype,
               "--decode", str(args.decode), "--chunk", "128", "--gpu-memory-fraction", "0.8"]
        res = subprocess.run(cmd, capture_output=True, text=True)
        print(res.stdout + res.stderr, flush=True)
        if res.returncode != 0:
            print(f"FAILED: {' '.join(cmd)}", flush=True)
            sys.exit(1)
        ours = torch.from_numpy(np.fromfile(out_path, dtype=np.float32).reshape(args.tokens, -1))
        prefill = args.tokens - args.decode
        rows.append(compare(f"ours {dtype}, all positions", ours, ref))
        rows.append(compare(f"ours {dtype}, prefill positions", ours[:prefill], ref[:prefill]))
        rows.append(compare(f"ours {dtype}, decode positions (graphs)", ours[prefill:], ref[prefill:]))
        if args.fp8:
            rows.append(compare(f"ours {dtype} vs the reference with FP8 activations, prefill positions",
                                ours[:prefill], ref_act[:prefill]))
            rows.append(compare(f"ours {dtype} vs the reference with FP8 activations, decode positions",
                                ours[prefill:], ref_act[prefill:]))
        print(f"{dtype}: ran in {time.time() - t1:.1f} s", flush=True)
    if args.fp8:
        try:
            with torch.no_grad():
                model = AutoModelForCausalLM.from_pretrained(work, dtype=torch.bfloat16, device_map="cuda").eval()
                hf_bf16 = model(ids[None].cuda()).logits[0].float().cpu()
            del model
        except Exception as e:  # an FP8 path transformers cannot run here: no yardstick
            hf_note = f"Transformers could not run the FP8 checkpoint here ({type(e).__name__}: {e})"[:300]
            print(hf_note, flush=True)
    if args.fp8:
        rows.append(compare("float32 with FP8 activations (the recipe's own rounding)", ref_act, ref))
    if hf_bf16 is not None:
        rows.append(compare("transformers " + ("FP8 checkpoint, bf16" if args.fp8 else "bf16") + " (yardstick)",
                            hf_bf16, ref))

    weights = ("the dequantized block-FP8 weights (our run reads the FP8 checkpoint)" if args.fp8
               else "the same bf16 weights")
    lines = [
        f"Reference: transformers {__import__('transformers').__version__} / torch {torch.__version__}, float32 on "
        f"{torch.cuda.get_device_name()}, over {weights}; {args.layers} layers of the Llama-3-8B shape "
        f"(vocab {config.vocab_size}, llama3 rope), {args.tokens} random tokens teacher-forced, the last "
        f"{args.decode} through the decode path." + (f" {hf_note}" if hf_note else ""),
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
