"""4-bit weight quantization (round to nearest per group) and the three published packings, written
the way each producer writes them and read back the way each producer's own reader decodes them.

Canonical form of a quantized [N, K] weight: codes q [N, K] in [0, 15], scale [N, G] and zero
[N, G] in [0, 16], the group of every input column g_idx [K]; W[n, k] = (q - zero) * scale at
(n, g_idx[k]).

Producers followed (read from their public sources; no code copied):
  AutoAWQ   awq/quantize/quantizer.py pseudo_quantize_tensor (zero_point: scale = (max - min) / 15,
            zero = -round(min / scale) clamped to [0, 15]); awq/modules/linear/gemm.py
            WQLinear_GEMM.from_linear (qweight [K, N/8], output column 8j + order_map[i] in nibble i of
            word j, order_map = [0, 2, 4, 6, 1, 3, 5, 7]; qzeros [K/g, N/8] packed alike; scales fp16
            [K/g, N]); awq/utils/packing_utils.py dequantize_gemm (AWQ_REVERSE_ORDER, (q - z) * s).
  GPTQ      auto_gptq/quantization/quantizer.py find_params (range widened to include 0; sym: scale =
            2 max|w| / 15, zero 8; asym: scale = (max - min) / 15, zero = round(-min / scale));
            auto_gptq/quantization/gptq.py (act-order: g_idx[perm[i]] = i // g);
            auto_gptq/nn_modules/qlinear/qlinear_cuda.py pack (qweight [K/8, N], input row 8i + j in
            bits 4j; v1 stores zero - 1, cast to uint32 and OR-ed into qzeros [G, N/8], column 8j + c
            in bits 4c) and its torch forward (zeros = field + 1; W = scales[g_idx] * (q - zeros[g_idx]));
            GPTQModel's "gptq_v2" stores the zero itself.
  compressed-tensors  quantization/utils/helpers.py calculate_qparams (sym: scale = max|w| / 7.5;
            asym: scale = (max - min) / 15, zero = -8 - min / scale, both ranges including 0), forward
            quantize / dequantize ((q - zp) * scale, groups taken in argsort(g_idx) order);
            compressors/pack_quantized/helpers.py pack_to_int32 (value + 8, element c of a row in bits
            4c of word c / 8; zero points packed along dim 0).
Scales are rounded to the dtype they are stored in before the codes are chosen, so the stored codes
are the nearest for the stored scales.
"""
import numpy as np

from safetensors_io import round_to

AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]       # nibble i of a word holds output column 8j + AWQ_ORDER[i]
AWQ_REVERSE_ORDER = [0, 4, 1, 5, 2, 6, 3, 7]  # what AutoAWQ's readers apply to undo it


class Quantized:
    def __init__(self, q, scale, zero, g_idx, group_size):
        self.q, self.scale, self.zero, self.g_idx, self.group_size = q, scale, zero, g_idx, group_size

    def dequantize(self):
        s = self.scale[:, self.g_idx]
        z = self.zero[:, self.g_idx]
        return (self.q.astype(np.float64) - z) * s


def column_groups(k, group_size, order=None):
    """g_idx [K]: column order (order None), or act-order: the i-th column of `order` is in group i // g."""
    g = group_size if group_size > 0 else k
    if order is None:
        return np.arange(k) // g
    g_idx = np.empty(k, dtype=np.int64)
    g_idx[np.asarray(order)] = np.arange(k) // g
    return g_idx


def quantize_rtn(w, g_idx, group_size, style, scale_dtype, clip=None):
    """Round to nearest per (row, group). `style`: 'awq' (asymmetric, AutoAWQ's range), 'gptq_sym',
    'gptq_asym', 'ct_sym', 'ct_asym'. `clip` [N, G] shrinks each group's range (AWQ's clipping search)."""
    w = np.asarray(w, dtype=np.float64)
    n, k = w.shape
    groups = int(g_idx.max()) + 1
    scale = np.zeros((n, groups))
    zero = np.zeros((n, groups), dtype=np.int64)
    q = np.zeros((n, k), dtype=np.int64)
    for g in range(groups):
        cols = np.nonzero(g_idx == g)[0]
        wg = w[:, cols]
        mx, mn = wg.max(axis=1), wg.min(axis=1)
        if clip is not None:
            mx, mn = mx * clip[:, g], mn * clip[:, g]
        if style == "awq":
            s = np.maximum(mx - mn, 1e-5) / 15
            s = round_to(scale_dtype, s).astype(np.float64)
            z = np.clip(-np.round(mn / s), 0, 15)
        elif style in ("gptq_sym", "gptq_asym", "ct_sym", "ct_asym"):
            mn, mx = np.minimum(mn, 0), np.maximum(mx, 0)
            if style.endswith("sym") and not style.endswith("asym"):
                amax = np.maximum(-mn, mx)
                amax = np.where(amax == 0, 1.0, amax)
                s = 2 * amax / 15
                s = round_to(scale_dtype, s).astype(np.float64)
                z = np.full(n, 8.0)
            else:
                both_zero = (mn == 0) & (mx == 0)
                mn, mx = np.where(both_zero, -1.0, mn), np.where(both_zero, 1.0, mx)
                s = (mx - mn) / 15
                s = round_to(scale_dtype, s).astype(np.float64)
                z = np.clip(np.round(-mn / s), 0, 15)
        else:
            raise ValueError(style)
        q[:, cols] = np.clip(np.round(wg / s[:, None]) + z[:, None], 0, 15)
        scale[:, g], zero[:, g] = s, z
    return Quantized(q, scale, zero, np.asarray(g_idx, dtype=np.int64), group_size)


# --- AutoAWQ GEMM ---

def pack_awq(qz):
    """qweight i32 [K, N/8], qzeros i32 [G, N/8], scales [G, N] (values; stored fp16)."""
    q = qz.q.T.astype(np.uint32)  # [K, N]
    z = qz.zero.T.astype(np.uint32)  # [G, N]

    def pack(a):
        out = np.zeros((a.shape[0], a.shape[1] // 8), dtype=np.uint32)
        for i in range(8):
            out |= a[:, AWQ_ORDER[i]::8] << np.uint32(4 * i)
        return out.view(np.int32)

    return pack(q), pack(z), qz.scale.T.copy()


def dequantize_awq(qweight, qzeros, scales, group_size):
    """AutoAWQ's dequantize_gemm: W [N, K]."""
    def unpack(a):
        a = a.view(np.uint32)
        nib = np.stack([(a >> np.uint32(4 * i)) & 0xF for i in range(8)], axis=-1)  # [rows, N/8, 8]
        nib = nib.reshape(a.shape[0], -1)
        order = np.arange(nib.shape[1]).reshape(-1, 8)[:, AWQ_REVERSE_ORDER].reshape(-1)
        return nib[:, order].astype(np.float64)

    iw, iz = unpack(qweight), unpack(qzeros)
    k = iw.shape[0]
    g = group_size if group_size > 0 else k
    wt = (iw - np.repeat(iz, g, axis=0)) * np.repeat(scales.astype(np.float64), g, axis=0)
    return wt.T


# --- GPTQ (AutoGPTQ v1 / GPTQModel v2) ---

def pack_gptq(qz, v1=True):
    """qweight i32 [K/8, N], qzeros i32 [G, N/8], scales [G, N], g_idx i32 [K]."""
    q = qz.q.T.astype(np.uint32)  # [K, N]
    k, n = q.shape
    qweight = np.zeros((k // 8, n), dtype=np.uint32)
    for j in range(8):
        qweight |= q[j::8, :] << np.uint32(4 * j)
    zeros = qz.zero.T.astype(np.int64) - (1 if v1 else 0)  # [G, N]
    # AutoGPTQ casts zero - 1 to uint32 before OR-ing it in: a zero of 0 (stored -1) sets every
    # higher bit of its word. Kept, so that fixtures hold exactly what AutoGPTQ writes.
    zeros = (zeros & 0xFFFFFFFF).astype(np.uint32)
    qzeros = np.zeros((zeros.shape[0], n // 8), dtype=np.uint32)
    for c in range(8):
        qzeros |= zeros[:, c::8] << np.uint32(4 * c)
    return qweight.view(np.int32), qzeros.view(np.int32), qz.scale.T.copy(), qz.g_idx.astype(np.int32)


def dequantize_gptq(qweight, qzeros, scales, g_idx, v1=True):
    """AutoGPTQ's torch path: W [N, K]."""
    qw, qzr = qweight.view(np.uint32), qzeros.view(np.uint32)
    k8, n = qw.shape
    weight = np.stack([(qw >> np.uint32(4 * j)) & 0xF for j in range(8)], axis=1).reshape(k8 * 8, n)
    zeros = np.stack([(qzr >> np.uint32(4 * c)) & 0xF for c in range(8)], axis=-1).reshape(qzr.shape[0], -1)
    zeros = zeros.astype(np.int64) + (1 if v1 else 0)
    gi = np.asarray(g_idx, dtype=np.int64)
    wt = scales.astype(np.float64)[gi] * (weight.astype(np.int64) - zeros[gi])
    return wt.T


# --- compressed-tensors pack-quantized ---

def pack_ct_rows(values_u, bits=4):
    """pack_to_int32 along the last dim of unsigned (already offset) values [rows, cols]."""
    rows, cols = values_u.shape
    words = -(-cols // 8)
    padded = np.zeros((rows, words * 8), dtype=np.uint32)
    padded[:, :cols] = values_u
    out = np.zeros((rows, words), dtype=np.uint32)
    for c in range(8):
        out |= padded[:, c::8] << np.uint32(4 * c)
    return out.view(np.int32)


def unpack_ct_rows(packed, cols):
    p = packed.view(np.uint32)
    nib = np.stack([(p >> np.uint32(4 * c)) & 0xF for c in range(8)], axis=-1).reshape(p.shape[0], -1)
    return nib[:, :cols].astype(np.int64) - 8  # signed


def pack_ct(qz, symmetric):
    """weight_packed i32 [N, ceil(K/8)], weight_scale [N, G], weight_zero_point i32 [ceil(N/8), G]
    (asymmetric) or None, weight_g_idx i32 [K], weight_shape i64 [2]."""
    n, k = qz.q.shape
    packed = pack_ct_rows(qz.q.astype(np.uint32))  # stored unsigned = signed + 8
    zp = None
    if not symmetric:
        zp = pack_ct_rows(qz.zero.T.astype(np.uint32)).T.copy()  # packed along dim 0
    return packed, qz.scale.copy(), zp, qz.g_idx.astype(np.int32), np.array([n, k], dtype=np.int64)


def dequantize_ct(packed, scale, zp, g_idx, shape, group_size):
    """compressed-tensors' decompress: W [N, K]."""
    n, k = int(shape[0]), int(shape[1])
    q = unpack_ct_rows(packed, k)
    if zp is None:
        z = np.zeros(scale.shape, dtype=np.int64)
    else:
        z = unpack_ct_rows(zp.T.copy(), n).T  # [N, G] signed
    g = group_size if group_size > 0 else k
    perm = np.argsort(g_idx, kind="stable") if g_idx is not None else np.arange(k)
    qs = q[:, perm]
    groups = np.arange(k) // g  # in the sorted order
    w_sorted = (qs - z[:, groups]) * scale.astype(np.float64)[:, groups]
    w = np.empty_like(w_sorted)
    w[:, perm] = w_sorted
    return w
