#!/usr/bin/env python3
"""Trains the project's small default model: a Llama-architecture decoder with a byte-level BPE
tokenizer, on the corpus that build_corpus.py assembles (Debian manual pages and docs), and writes
it in the Hugging Face format the engine loads.

Needs torch, transformers (5.x), tokenizers, safetensors and numpy; runs on one GPU (falls back to
the CPU for smoke tests). Everything is seeded: the tokenizer, the initialization and the data
order are the same on every run with the same flags (bit-exact only on the same GPU and library
versions).

Steps:
  1. train a byte-level BPE tokenizer (tokenizers) on the train split
  2. tokenize both splits: every document becomes  <s> text </s>
  3. train LlamaForCausalLM from scratch: random windows of --seq tokens, bf16 autocast, AdamW,
     linear warm-up then cosine decay
  4. save config.json, model.safetensors (bf16; sharded when over --max-shard-size),
     tokenizer.json, tokenizer_config.json, generation_config.json
  5. reload the saved checkpoint in float32 and measure the held-out perplexity; write
     heldout_reference.json (a short held-out text, its token ids, the per-position log-probs and
     their perplexity) for the engine's parity test; write samples and metrics to results.json

The defaults are the recipe of launch/model (2400 steps of 64 x 1024 tokens, ~10 epochs of the
16 M-token corpus; more epochs overfit it: see launch/train/README.md). --steps 0 instead picks the
step count from --train-seconds after timing a few steps; the chosen count is printed and saved in
results.json, so a rerun with --steps N repeats it.

Example (the command behind launch/model, see launch/train/README.md):
  python3 launch/train/train.py --corpus .device/corpus --out /tmp/model
"""
import argparse
import json
import lzma
import math
import os
import random
import sys
import time

import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

BOS, EOS = "<s>", "</s>"


def log(*args):
    print(f"[{time.strftime('%H:%M:%S')}]", *args, flush=True)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default=".device/corpus", help="folder with train.jsonl.xz and heldout.jsonl.xz")
    ap.add_argument("--out", required=True, help="output folder (the model)")
    ap.add_argument("--seed", type=int, default=1234)
    # tokenizer
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--tokenizer-train-mb", type=float, default=50, help="train the BPE on this much text (MB)")
    # model
    ap.add_argument("--hidden", type=int, default=384)
    ap.add_argument("--layers", type=int, default=7)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--ffn", type=int, default=1024)
    ap.add_argument("--max-pos", type=int, default=1024)
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--norm-eps", type=float, default=1e-5)
    # training
    ap.add_argument("--seq", type=int, default=1024, help="training window (tokens)")
    ap.add_argument("--batch", type=int, default=64, help="windows per step")
    ap.add_argument("--steps", type=int, default=2400, help="0: as many as fit in --train-seconds")
    ap.add_argument("--train-seconds", type=float, default=300)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-ratio", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=150)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--compile", type=int, default=1, help="torch.compile the model (1/0)")
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--eval-tokens", type=int, default=0, help="cap on held-out tokens scored (0: all)")
    # output
    ap.add_argument("--max-shard-size", default="15MB", help="shard model.safetensors above this")
    ap.add_argument("--ref-tokens", type=int, default=384, help="max length of the reference text in tokens")
    return ap.parse_args()


def seed_everything(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)


def load_split(corpus, split):
    with lzma.open(os.path.join(corpus, f"{split}.jsonl.xz"), "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


# ---------------------------------------------------------------------------------------------
# Tokenizer


def train_tokenizer(train_docs, vocab, max_mb, seed):
    """Byte-level BPE (GPT-2 style pre-tokenization, no normalizer), special tokens <s> and </s>
    at ids 0 and 1, and a post-processor that puts <s> before every encoded text."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, min_frequency=2, special_tokens=[BOS, EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    # A deterministic sample of documents (shuffled with the seed) up to max_mb.
    order = list(range(len(train_docs)))
    random.Random(seed).shuffle(order)
    sample, total = [], 0
    for i in order:
        sample.append(train_docs[i]["text"])
        total += len(sample[-1])
        if total >= max_mb * 1e6:
            break
    log(f"tokenizer: training BPE vocab {vocab} on {len(sample)} documents, {total / 1e6:.1f} MB")
    tok.train_from_iterator(sample, trainer=trainer, length=len(sample))
    bos_id, eos_id = tok.token_to_id(BOS), tok.token_to_id(EOS)
    assert (bos_id, eos_id) == (0, 1), (bos_id, eos_id)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A:0", pair=f"{BOS} $A:0 {BOS} $B:1", special_tokens=[(BOS, bos_id)])
    return tok


def tokenize_docs(tok, docs):
    """One flat uint16 stream: <s> doc </s> <s> doc </s> ..."""
    texts = [d["text"] for d in docs]
    out = []
    for start in range(0, len(texts), 2048):
        encs = tok.encode_batch(texts[start:start + 2048], add_special_tokens=True)  # <s> + text
        for e in encs:
            out.append(np.asarray(e.ids + [1], dtype=np.uint16))  # + </s>
    return np.concatenate(out)


def write_tokenizer_files(tok, out):
    tok.save(os.path.join(out, "tokenizer.json"))
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": EOS,
        "unk_token": None,
        "add_bos_token": True,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": None,  # filled in by the caller
        "added_tokens_decoder": {
            "0": {"content": BOS, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                  "special": True},
            "1": {"content": EOS, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                  "special": True},
        },
    }
    return cfg


# ---------------------------------------------------------------------------------------------
# Model and training


def make_config(args, vocab_size):
    cfg = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=args.hidden,
        intermediate_size=args.ffn,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        head_dim=args.hidden // args.heads,
        hidden_act="silu",
        max_position_embeddings=args.max_pos,
        initializer_range=0.02,
        rms_norm_eps=args.norm_eps,
        rope_parameters={"rope_type": "default", "rope_theta": args.rope_theta},
        tie_word_embeddings=True,
        attention_bias=False,
        mlp_bias=False,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=None,
        use_cache=True,
    )
    # transformers < 5 spells the rope settings as a top-level rope_theta.
    if getattr(cfg, "rope_parameters", None) is None:
        cfg.rope_theta = args.rope_theta
    return cfg


def lr_at(step, total, args):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    progress = min(1.0, (step - args.warmup) / max(1, total - args.warmup))
    return args.lr * (args.min_lr_ratio + (1 - args.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


@torch.no_grad()
def evaluate(model, stream, seq, device, max_tokens=0, batch=32, autocast=True):
    """Mean NLL (nats/token) over non-overlapping windows of `seq` tokens of `stream`; the first
    token of each window is context only. Returns (mean_nll, tokens_scored)."""
    model.eval()
    n = len(stream)
    if max_tokens:
        n = min(n, max_tokens)
    nwin = (n - 1) // seq
    data = torch.from_numpy(stream[: nwin * seq + 1].astype(np.int64))
    total_nll, total_tok = 0.0, 0
    for b0 in range(0, nwin, batch):
        rows = [data[i * seq: i * seq + seq + 1] for i in range(b0, min(nwin, b0 + batch))]
        x = torch.stack(rows).to(device)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=autocast):
            logits = model(input_ids=x[:, :-1]).logits
        nll = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                                                x[:, 1:].reshape(-1), reduction="sum")
        total_nll += nll.item()
        total_tok += x[:, 1:].numel()
    model.train()
    return total_nll / max(1, total_tok), total_tok


def train(args, model, train_stream, heldout_stream, device):
    g = torch.Generator().manual_seed(args.seed)
    data = torch.from_numpy(train_stream.astype(np.int64)).to(device)
    span = torch.arange(args.seq + 1, device=device)
    hi = len(train_stream) - args.seq - 1

    def batch():
        off = torch.randint(0, hi, (args.batch,), generator=g).to(device)
        return data[off[:, None] + span]

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=device.type == "cuda")
    fwd = model
    if args.compile and device.type == "cuda":
        try:
            fwd = torch.compile(model)
        except Exception as e:  # noqa: BLE001
            log(f"torch.compile unavailable ({e}); eager")

    def step_fn(step, total):
        lr = lr_at(step, total, args)
        for group in opt.param_groups:
            group["lr"] = lr
        x = batch()
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            logits = fwd(input_ids=x[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss, gnorm, lr

    history = []
    total = args.steps
    t_start = time.time()
    first = 0
    if fwd is not model:
        # The first step compiles; fall back to eager if compilation fails.
        try:
            step_fn(0, total or 10 ** 9)[0].item()
        except Exception as e:  # noqa: BLE001
            log(f"torch.compile failed ({type(e).__name__}: {str(e)[:300]}); eager")
            opt.zero_grad(set_to_none=True)
            fwd = model
            step_fn(0, total or 10 ** 9)
        first = 1
    if total == 0:
        # Time steps 10..30 (after compilation and warm-up) and size the run to --train-seconds.
        provisional = 10 ** 9
        for step in range(first, 30):
            if step == 10:
                if device.type == "cuda":
                    torch.cuda.synchronize()
                t10 = time.time()
            loss, _, _ = step_fn(step, provisional)
        loss.item()
        per_step = (time.time() - t10) / 20
        elapsed = time.time() - t_start
        total = max(60, int((args.train_seconds - elapsed) / per_step) + 30)
        log(f"timed {per_step * 1000:.1f} ms/step ({args.batch * args.seq / per_step / 1e6:.2f} M tok/s); "
            f"first 30 steps took {elapsed:.0f}s; running --steps {total}")
        start = 30
        # The warm-up of the first 30 steps used the provisional schedule, which equals the real
        # one while step < --warmup (linear warm-up does not depend on the total).
        assert args.warmup >= 30
    else:
        start = first
    for step in range(start, total):
        loss, gnorm, lr = step_fn(step, total)
        if step % 100 == 0 or step == total - 1:
            rec = {"step": step, "loss": round(loss.item(), 4), "gnorm": round(gnorm.item(), 3), "lr": lr,
                   "seconds": round(time.time() - t_start, 1)}
            if (step % args.eval_every == 0 and step > 0) or step == total - 1:
                nll, _ = evaluate(model, heldout_stream, args.seq, device, max_tokens=262144)
                rec["heldout_ppl_bf16_partial"] = round(math.exp(nll), 3)
            history.append(rec)
            log(json.dumps(rec))
    if device.type == "cuda":
        torch.cuda.synchronize()
    return total, time.time() - t_start, history


# ---------------------------------------------------------------------------------------------
# Outputs


def pick_reference_text(tok, heldout_docs, max_tokens, seed):
    """A short held-out passage: whole lines from a man page in the held-out split, starting at a
    section heading, at most max_tokens tokens with the leading <s>."""
    rng = random.Random(seed)
    candidates = [d for d in heldout_docs if d["name"].startswith("man/man1/") and len(d["text"]) > 3000]
    if not candidates:
        candidates = [d for d in heldout_docs if len(d["text"]) > 1000]
    doc = candidates[rng.randrange(len(candidates))]
    lines = doc["text"].split("\n")
    start = next((i for i, l in enumerate(lines) if l.strip() == "DESCRIPTION"), 0)
    text = ""
    for line in lines[start:]:
        candidate = text + line + "\n"
        if len(tok.encode(candidate, add_special_tokens=True).ids) > max_tokens:
            break
        text = candidate
    return doc["name"], text


@torch.no_grad()
def reference(model, tok, name, text, device):
    ids = tok.encode(text, add_special_tokens=True).ids
    x = torch.tensor([ids], device=device)
    logits = model(input_ids=x).logits[0].double()
    logprobs = torch.log_softmax(logits, dim=-1)
    target = torch.tensor(ids[1:], device=device)
    lp = logprobs[:-1].gather(1, target[:, None])[:, 0]
    nll = -lp.mean().item()
    greedy = []
    ctx = list(ids)
    for _ in range(16):
        nxt = int(model(input_ids=torch.tensor([ctx], device=device)).logits[0, -1].argmax())
        greedy.append(nxt)
        ctx.append(nxt)
    return {
        "description": "Held-out reference for the engine's perplexity test: `text` (from the held-out split, "
                       "never trained on) encoded with the post-processor (leading <s>) gives `token_ids`; "
                       "transformers, float32, the saved bf16 weights upcast, teacher-forced over token_ids "
                       "gives log p(token_ids[i+1] | token_ids[..i]) = `logprobs[i]`; perplexity = "
                       "exp(-mean(logprobs)). `greedy` are 16 greedy tokens after the whole text.",
        "source_document": name,
        "text": text,
        "token_ids": ids,
        "logprobs": [round(v, 7) for v in lp.tolist()],
        "mean_nll": nll,
        "perplexity": math.exp(nll),
        "greedy": greedy,
        "dtype": "float32",
    }


@torch.no_grad()
def samples(model, tok, device, seed):
    prompts = ["The command", "NAME\n       grep - ", "DESCRIPTION\n       This program",
               "The following options are supported:\n\n       -v"]
    out = []
    for p in prompts:
        ids = torch.tensor([tok.encode(p, add_special_tokens=True).ids], device=device)
        greedy = model.generate(ids, max_new_tokens=60, do_sample=False, eos_token_id=1, pad_token_id=1)
        torch.manual_seed(seed)
        sampled = model.generate(ids, max_new_tokens=60, do_sample=True, temperature=0.7, top_p=0.9, top_k=0,
                                 eos_token_id=1, pad_token_id=1)
        out.append({"prompt": p,
                    "greedy": tok.decode(greedy[0, ids.shape[1]:].tolist(), skip_special_tokens=False),
                    "temperature_0.7": tok.decode(sampled[0, ids.shape[1]:].tolist(), skip_special_tokens=False)})
    return out


def main():
    args = parse_args()
    t0 = time.time()
    seed_everything(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    os.makedirs(args.out, exist_ok=True)
    log(f"torch {torch.__version__} on {device} "
        f"({torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu'})")

    train_docs = load_split(args.corpus, "train")
    heldout_docs = load_split(args.corpus, "heldout")
    log(f"corpus: {len(train_docs)} train documents ({sum(len(d['text']) for d in train_docs) / 1e6:.1f} MB), "
        f"{len(heldout_docs)} held-out ({sum(len(d['text']) for d in heldout_docs) / 1e6:.2f} MB)")

    tok = train_tokenizer(train_docs, args.vocab, args.tokenizer_train_mb, args.seed)
    vocab_size = tok.get_vocab_size()
    tok_cfg = write_tokenizer_files(tok, args.out)
    tok_cfg["model_max_length"] = args.max_pos
    with open(os.path.join(args.out, "tokenizer_config.json"), "w") as f:
        json.dump(tok_cfg, f, indent=2)
    train_stream = tokenize_docs(tok, train_docs)
    heldout_stream = tokenize_docs(tok, heldout_docs)
    heldout_bytes = sum(len(d["text"].encode()) for d in heldout_docs)
    log(f"tokens: train {len(train_stream) / 1e6:.2f} M, held-out {len(heldout_stream) / 1e6:.3f} M "
        f"({heldout_bytes / len(heldout_stream):.2f} bytes/token); {time.time() - t0:.0f}s so far")

    config = make_config(args, vocab_size)
    seed_everything(args.seed)
    model = LlamaForCausalLM(config).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: {n_params / 1e6:.2f} M parameters (tied embeddings), config {config.to_dict()}")

    steps, train_seconds, history = train(args, model, train_stream, heldout_stream, device)
    log(f"trained {steps} steps in {train_seconds:.0f}s "
        f"({steps * args.batch * args.seq / 1e6:.0f} M tokens, {steps * args.batch * args.seq / len(train_stream):.2f} "
        f"epochs)")

    # Save in bf16.
    model.to(torch.bfloat16)
    model.config.use_cache = True
    model.generation_config = GenerationConfig(bos_token_id=0, eos_token_id=1, pad_token_id=1, do_sample=True,
                                               temperature=0.7, top_p=0.9, top_k=0,
                                               max_length=args.max_pos)
    model.save_pretrained(args.out, max_shard_size=args.max_shard_size)
    cfg_path = os.path.join(args.out, "config.json")
    with open(cfg_path) as f:
        cfg_json = json.load(f)
    dtype_key = "dtype" if "dtype" in cfg_json or "torch_dtype" not in cfg_json else "torch_dtype"
    if cfg_json.get(dtype_key) != "bfloat16":  # the weights on disk are bf16, whatever the config said
        log(f"config.json: {dtype_key} {cfg_json.get(dtype_key)!r} -> 'bfloat16'")
        cfg_json[dtype_key] = "bfloat16"
        with open(cfg_path, "w") as f:
            json.dump(cfg_json, f, indent=2, sort_keys=True)
            f.write("\n")
    log(f"saved: {sorted(os.listdir(args.out))}")
    del model
    torch.cuda.empty_cache()

    # Reload the saved bf16 checkpoint, upcast to float32, and measure.
    try:
        ref_model = LlamaForCausalLM.from_pretrained(args.out, dtype=torch.float32).to(device)
    except TypeError:
        ref_model = LlamaForCausalLM.from_pretrained(args.out, torch_dtype=torch.float32).to(device)
    ref_model.eval()
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
    nll, scored = evaluate(ref_model, heldout_stream, args.seq, device, max_tokens=args.eval_tokens, autocast=False)
    results = {
        "parameters": n_params,
        "steps": steps,
        "train_seconds": round(train_seconds, 1),
        "tokens_seen": steps * args.batch * args.seq,
        "train_tokens": int(len(train_stream)),
        "heldout_tokens": int(len(heldout_stream)),
        "heldout_bytes": heldout_bytes,
        "heldout_documents": len(heldout_docs),
        "heldout_scored_tokens": scored,
        "heldout_nll": nll,
        "heldout_ppl": math.exp(nll),
        "heldout_bits_per_byte": nll * scored / math.log(2) / (heldout_bytes * scored / len(heldout_stream)),
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "versions": {"torch": torch.__version__, "transformers": __import__("transformers").__version__,
                     "tokenizers": __import__("tokenizers").__version__},
        "args": vars(args),
        "history": history,
    }
    log(f"held-out (float32, saved weights): ppl {results['heldout_ppl']:.3f} over {scored} tokens, "
        f"{results['heldout_bits_per_byte']:.4f} bits/byte")
    name, text = pick_reference_text(tok, heldout_docs, args.ref_tokens, args.seed)
    ref = reference(ref_model, tok, name, text, device)
    with open(os.path.join(args.out, "heldout_reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
    log(f"reference: {name}, {len(ref['token_ids'])} tokens, ppl {ref['perplexity']:.6f}")
    try:
        results["samples"] = samples(ref_model, tok, device, args.seed)
    except Exception as e:  # noqa: BLE001  (samples are for the README only)
        log(f"samples failed: {e!r}")
    results["total_seconds"] = round(time.time() - t0, 1)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    for s in results.get("samples", []):
        log(f"--- {s['prompt']!r}\n[greedy] {s['greedy']}\n[t=0.7] {s['temperature_0.7']}")
    log(f"done in {results['total_seconds']:.0f}s")


if __name__ == "__main__":
    main()
