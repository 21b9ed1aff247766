"""A float64 numpy forward pass of the Llama family as Hugging Face transformers computes it
(LlamaForCausalLM, Qwen2ForCausalLM): the reference for the 4-bit fixtures and the calibration
forward of the quantizer. Default RoPE only (what the fixtures and launch/model use).
"""
import json
import os

import numpy as np


class Config:
    def __init__(self, d):
        self.hidden = d["hidden_size"]
        self.layers = d["num_hidden_layers"]
        self.heads = d["num_attention_heads"]
        self.kv_heads = d.get("num_key_value_heads", self.heads)
        self.head_dim = d.get("head_dim") or self.hidden // self.heads
        self.ffn = d["intermediate_size"]
        self.vocab = d["vocab_size"]
        self.eps = d.get("rms_norm_eps", 1e-6)
        rope = d.get("rope_parameters") or d.get("rope_scaling") or {}
        if rope.get("rope_type", rope.get("type", "default")) not in ("default", None):
            raise ValueError("only default RoPE is implemented")
        self.theta = rope.get("rope_theta", d.get("rope_theta", 10000.0))
        self.tied = d.get("tie_word_embeddings", False)
        self.qkv_bias = d.get("model_type") == "qwen2" or d.get("attention_bias", False)

    @staticmethod
    def load(directory):
        with open(os.path.join(directory, "config.json")) as f:
            return Config(json.load(f))


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def silu(x):
    return x / (1.0 + np.exp(-x))


class Model:
    """`weights`: {name: float array} with the Hugging Face names (linear weights [out, in])."""

    def __init__(self, config, weights):
        self.c = config
        self.w = {k: np.asarray(v, dtype=np.float64) for k, v in weights.items()}
        c = config
        inv = 1.0 / (c.theta ** (np.arange(0, c.head_dim, 2, dtype=np.float64) / c.head_dim))
        self.inv_freq = inv

    def rope(self, x, positions):
        # x [T, heads, head_dim]; rotate_half pairing (i, i + d/2)
        freqs = np.outer(positions, self.inv_freq)
        emb = np.concatenate([freqs, freqs], axis=-1)
        cos, sin = np.cos(emb)[:, None, :], np.sin(emb)[:, None, :]
        half = x.shape[-1] // 2
        rot = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
        return x * cos + rot * sin

    def linear(self, name, x):
        y = x @ self.w[name + ".weight"].T
        b = self.w.get(name + ".bias")
        return y if b is None else y + b

    def layer_inputs(self, layer, h, positions, record=None):
        """One decoder layer on hidden states h [T, hidden]; `record` (a dict) receives the inputs of
        its linears: 'qkv', 'o', 'gate_up', 'down'."""
        c, p = self.c, "model.layers.%d." % layer
        x = rms_norm(h, self.w[p + "input_layernorm.weight"], c.eps)
        if record is not None:
            record["qkv"] = x
        t = x.shape[0]
        q = self.linear(p + "self_attn.q_proj", x).reshape(t, c.heads, c.head_dim)
        k = self.linear(p + "self_attn.k_proj", x).reshape(t, c.kv_heads, c.head_dim)
        v = self.linear(p + "self_attn.v_proj", x).reshape(t, c.kv_heads, c.head_dim)
        q, k = self.rope(q, positions), self.rope(k, positions)
        rep = c.heads // c.kv_heads
        k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
        scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(c.head_dim)
        mask = np.triu(np.ones((t, t), dtype=bool), 1)
        scores[:, mask] = -np.inf
        scores -= scores.max(axis=-1, keepdims=True)
        probs = np.exp(scores)
        probs /= probs.sum(axis=-1, keepdims=True)
        attn = np.einsum("hqk,khd->qhd", probs, v).reshape(t, c.heads * c.head_dim)
        if record is not None:
            record["o"] = attn
        h = h + self.linear(p + "self_attn.o_proj", attn)
        x = rms_norm(h, self.w[p + "post_attention_layernorm.weight"], c.eps)
        if record is not None:
            record["gate_up"] = x
        act = silu(self.linear(p + "mlp.gate_proj", x)) * self.linear(p + "mlp.up_proj", x)
        if record is not None:
            record["down"] = act
        return h + self.linear(p + "mlp.down_proj", act)

    def embed(self, ids):
        return self.w["model.embed_tokens.weight"][np.asarray(ids)]

    def head(self, h):
        h = rms_norm(h, self.w["model.norm.weight"], self.c.eps)
        head = self.w["model.embed_tokens.weight" if self.c.tied else "lm_head.weight"]
        return h @ head.T

    def logits(self, ids):
        """Logits [T, vocab] at every position of one sequence."""
        h = self.embed(ids)
        positions = np.arange(len(ids), dtype=np.float64)
        for layer in range(self.c.layers):
            h = self.layer_inputs(layer, h, positions)
        return self.head(h)

    def greedy(self, prompt, new_tokens):
        """Greedy continuation: (tokens, logits [new_tokens, vocab], smallest top-1/top-2 gap)."""
        ids, out, rows, gap = list(prompt), [], [], np.inf
        for _ in range(new_tokens):
            last = self.logits(ids)[-1]
            order = np.argsort(last)
            gap = min(gap, last[order[-1]] - last[order[-2]])
            nxt = int(order[-1])
            out.append(nxt)
            rows.append(last)
            ids.append(nxt)
        return out, np.stack(rows), gap
