"""GPTQ (Frantar et al. 2022) in numpy, as AutoGPTQ's auto_gptq/quantization/gptq.py runs it: the
columns of W are quantized one at a time (in act-order: by decreasing Hessian diagonal), and each
column's rounding error is spread over the columns not yet quantized through the inverse
Hessian's Cholesky factor, so that the layer's outputs on the calibration inputs move as little as
4 bits allow. Group scales and zeros are taken (GPTQ's quantizer.find_params) from each group's
columns as updated when the group starts. Block-lazy updates, static groups and true-sequential
order within a layer are not implemented (they change speed, not the result, or little).
"""
import numpy as np

import int4_formats as fmt
from safetensors_io import round_to


def _range_params(mn, mx, sym, scale_dtype):
    """Scale and zero per row for the range [mn, mx] (which holds 0), as GPTQ's find_params."""
    if sym:
        amax = np.maximum(-mn, mx)
        amax = np.where(amax == 0, 1.0, amax)
        s = round_to(scale_dtype, 2 * amax / 15).astype(np.float64)
        z = np.full(len(s), 8.0)
    else:
        both = (mn == 0) & (mx == 0)
        mn, mx = np.where(both, -1.0, mn), np.where(both, 1.0, mx)
        s = round_to(scale_dtype, (mx - mn) / 15).astype(np.float64)
        z = np.clip(np.round(-mn / s), 0, 15)
    return s, z


def _params(cols, sym, scale_dtype, mse=False, grid=100, max_shrink=0.8, norm=2.4):
    """GPTQ's find_params on [N, g] columns: scale and zero per row (range widened to include 0).
    mse: the range shrunk by the factor (1 - i / grid, i < grid * max_shrink) that minimises each
    row's sum of |dequantized - w|^norm (the option GPTQ's quantizer calls mse; the 2.4 norm
    weighs large errors more than squares would)."""
    mn = np.minimum(cols.min(axis=1), 0)
    mx = np.maximum(cols.max(axis=1), 0)
    s, z = _range_params(mn, mx, sym, scale_dtype)
    if not mse:
        return s, z
    best = np.full(len(s), np.inf)
    for i in range(int(max_shrink * grid)):
        shrink = 1 - i / grid
        si, zi = _range_params(shrink * mn, shrink * mx, sym, scale_dtype)
        q = np.clip(np.round(cols / si[:, None]) + zi[:, None], 0, 15)
        err = (np.abs((q - zi[:, None]) * si[:, None] - cols) ** norm).sum(axis=1)
        better = err < best
        best = np.where(better, err, best)
        s, z = np.where(better, si, s), np.where(better, zi, z)
    return s, z


def gptq_quantize(w, x, group_size, sym, act_order, scale_dtype, damp=0.01, mse=False):
    """w [N, K] float, x [T, K] calibration inputs; returns an int4_formats.Quantized. mse: each
    group's range chosen by _params' shrink search."""
    w = np.array(w, dtype=np.float64)
    n, k = w.shape
    g = group_size if group_size > 0 else k
    h = 2.0 * x.T.astype(np.float64) @ x.astype(np.float64) / max(len(x), 1)
    dead = np.diag(h) == 0
    h[dead, dead] = 1.0
    w[:, dead] = 0.0
    perm = np.argsort(-np.diag(h), kind="stable") if act_order else np.arange(k)
    w = w[:, perm]
    h = h[np.ix_(perm, perm)]
    h[np.diag_indices(k)] += damp * np.mean(np.diag(h))
    # The upper Cholesky factor of H^-1 (torch: cholesky_inverse then cholesky(upper=True)).
    hinv = np.linalg.cholesky(np.linalg.inv(h)).T
    q = np.zeros((n, k), dtype=np.int64)
    groups = -(-k // g)
    scale = np.zeros((n, groups))
    zero = np.zeros((n, groups), dtype=np.int64)
    s = z = None
    for i in range(k):
        if i % g == 0:
            s, z = _params(w[:, i:i + g], sym, scale_dtype, mse)
            scale[:, i // g], zero[:, i // g] = s, z
        col = w[:, i]
        qi = np.clip(np.round(col / s) + z, 0, 15)
        q[:, i] = qi
        err = (col - (qi - z) * s) / hinv[i, i]
        w[:, i + 1:] -= np.outer(err, hinv[i, i + 1:])
    # Back to column order: column perm[i] holds quantized column i, in group i // g.
    q_cols = np.empty_like(q)
    q_cols[:, perm] = q
    g_idx = np.empty(k, dtype=np.int64)
    g_idx[perm] = np.arange(k) // g
    return fmt.Quantized(q_cols, scale, zero, g_idx, group_size)
