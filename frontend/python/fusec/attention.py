"""Attention, recognised in a model as written and emitted as fusec's `attention` composite,
so the flash-attention lowerings apply instead of a materialised [T, T] score matrix.

Two forms are recognised:
  * scaled_dot_product_attention (and the flash/efficient variants it dispatches to): its
    arguments say everything; a static mask must be the causal one;
  * the explicit pattern, P @ V where P = softmax(masked, scaled Q K^T) over the last axis:
    the chain from the score matmul to the softmax may hold reshapes, casts, multiplications
    and divisions by constants, and a static mask (masked_fill / where with -inf, or an
    additive bias). The match is structural, and it is then checked on the real example
    values (the composite's result against the model's, in float64): a chain that does
    something else (another mask, a temperature that is not constant) is left as it is,
    never rewritten into a different function.
Grouped-query attention, K and V repeated over the query heads the usual way (x[:, :, :, None]
.expand(...).reshape(...), Llama's repeat_kv), or given with fewer heads (SDPA's enable_gqa), is
seen through (`unrepeat`): the composite takes the unrepeated K and V, whose heads divide q's
(ops.def), so no repeated copy is made and the backward sums dK, dV over each group inside its
kernel. A group along another batch axis is read through a broadcast over
[.., Hkv, group, T, d] operands instead.
"""
import math

import torch

from .capture import ExportError


def _def(conv, v):
    return conv.defs.get(v.name)


def _splat(conv, v):
    """The value of `v` if it is a constant broadcast or reshaped, else None."""
    while True:
        d = _def(conv, v)
        if d is None:
            return None
        if d.op == "constant":
            return d.meta["value"]
        if d.op not in ("reshape", "broadcast"):
            return None
        v = d.operands[0]


def _static(conv, v):
    return v.name not in conv.dynamic


def _nonunit_order(d):
    """For a permute, its input's non-unit axes in output order (unit axes move freely)."""
    s, perm = d.operands[0].shape, d.meta["perm"]
    return [p for p in perm if s[p] != 1]


def _order_preserving(d):
    """A reshape, or a permute that only moves unit axes: the same elements in the same order."""
    if d.op == "reshape":
        return True
    if d.op == "permute":
        order = _nonunit_order(d)
        return order == sorted(order)
    return False


def _candidates(conv, v, trailing):
    """`v` and the values it was regrouped from (order-preserving reshapes and permutes) that
    end in `trailing`: the same rows in the same order under other batch dims."""
    found = []
    while True:
        if v.shape[-2:] == tuple(trailing):
            found.append(v)
        d = _def(conv, v)
        if d is None or not _order_preserving(d):
            return found
        v = d.operands[0]


def _untransposed(conv, v):
    """For `v` = [.., d, T] some X [.., T, d] transposed (possibly regrouped on either side):
    the candidates of X laid out as [.., T, d]; a fresh permute of `v` when no such X is
    found."""
    d_, t = v.shape[-2:]
    cur = v
    while d_ > 1 and t > 1:
        d = _def(conv, cur)
        if d is None:
            break
        if d.op == "permute" and not _order_preserving(d):
            order = _nonunit_order(d)
            ranked = sorted(order)
            if len(order) >= 2 and order == ranked[:-2] + [ranked[-1], ranked[-2]]:
                x = d.operands[0]
                found = _candidates(conv, x, (t, d_))
                return found or [conv.reshape(x, v.shape[:-2] + (t, d_))]
            break
        if not _order_preserving(d):
            break
        cur = d.operands[0]
    r = len(v.shape)
    return [conv.permute(v, list(range(r - 2)) + [r - 1, r - 2])]


def unrepeat(conv, v):
    """If `v` is some K repeated along an axis (reshape(broadcast(K with a unit axis))), possibly
    permuted afterwards: (K laid out as `v` with that axis unrepeated, the axis, the repeat
    count). Else None."""
    d = _def(conv, v)
    if d is None:
        return None
    if d.op == "permute":
        r = unrepeat(conv, d.operands[0])
        if r is None:
            return None
        base, axis, rep = r
        perm = d.meta["perm"]
        return conv.permute(base, perm), perm.index(axis), rep
    if d.op != "reshape":
        return None
    b = d.operands[0]
    db = _def(conv, b)
    if db is None or db.op != "broadcast" or len(b.shape) != len(v.shape) + 1:
        return None
    unit = db.operands[0]
    for i in range(len(v.shape)):
        grouped = b.shape[:i] == v.shape[:i] and b.shape[i + 2:] == v.shape[i + 1:]
        if grouped and b.shape[i] * b.shape[i + 1] == v.shape[i] and b.shape[i + 1] > 1 and \
                unit.shape == b.shape[:i + 1] + (1,) + b.shape[i + 2:]:
            shape = b.shape[:i + 1] + b.shape[i + 2:]
            du = _def(conv, unit)
            base = du.operands[0] if du is not None and du.op == "reshape" and du.operands[0].shape == shape \
                else conv.reshape(unit, shape)
            return base, i, b.shape[i + 1]
    return None


def _grouped(conv, q, k, v):
    """(k, v, axis, group) when K and V have fewer heads than Q (given so, or repeated), else None."""
    if k.shape[:-2] != q.shape[:-2]:
        r = len(q.shape)
        ok = r >= 3 and len(k.shape) == r and k.shape[:-3] == q.shape[:-3] and q.shape[-3] % k.shape[-3] == 0 \
            and v.shape[:-2] == k.shape[:-2]
        if not ok:
            raise ExportError(f"unsupported op attention over query {list(q.shape)}, key {list(k.shape)}, value {list(v.shape)}")
        return k, v, r - 3, q.shape[-3] // k.shape[-3]
    rk, rv = unrepeat(conv, k), unrepeat(conv, v)
    if rk is None or rv is None or rk[1:] != rv[1:] or rk[1] >= len(q.shape) - 2:
        return None
    return rk[0], rv[0], rk[1], rk[2]


def emit(conv, q, k, v, causal, scale):
    """attention(q, k, v) as the composite; returns (o, lse) in q's batch layout."""
    group = _grouped(conv, q, k, v)
    if group is not None and group[2] == len(q.shape) - 3:
        # Grouped over the heads (the last batch axis): fusec's attention takes K and V with
        # their own heads, and its kernels read each once per group and sum dK, dV over it.
        k, v = group[0], group[1]
    elif group is not None:
        k, v, axis, rep = group
        qs = q.shape[:axis] + (q.shape[axis] // rep, rep) + q.shape[axis + 1:]
        q5 = conv.reshape(q, qs)

        def spread(t):
            unit = conv.reshape(t, t.shape[:axis + 1] + (1,) + t.shape[axis + 1:])
            return conv.emit("broadcast", [unit], t.shape[:axis + 1] + (rep,) + t.shape[axis + 1:], t.dtype)

        o, lse = emit(conv, q5, spread(k), spread(v), causal, scale)
        return conv.reshape(o, q.shape[:-1] + (v.shape[-1],)), conv.reshape(lse, q.shape[:-1])
    o, lse = conv.emit_multi("attention", [q, k, v], [(q.shape[:-1] + (v.shape[-1],), q.dtype),
                                                     (q.shape[:-1], torch.float32)],
                             f"causal = {'true' if causal else 'false'}, scale = {float(scale)!r}", "attn")
    return o, lse


def with_dropout(conv, q, k, v, causal, scale, p):
    """softmax(q kᵀ · scale, causal or not) with dropout on the weights, then · v: SDPA with
    dropout_p > 0 in a train-mode export, as explicit ops (fusec's fused attention has no
    dropout; its backward regenerates the mask like any dropout)."""
    if q.shape[:-2] != k.shape[:-2] or k.shape[:-2] != v.shape[:-2]:
        raise ExportError("unsupported op scaled_dot_product_attention with dropout_p > 0 and grouped K/V heads")
    shape = q.shape[:-1] + (k.shape[-2],)
    s = conv.scaled(conv.emit("matmul", [q, k], shape, q.dtype, "transpose_b = true"), scale)
    if causal:
        n = len(shape)
        row = conv.emit("iota", [], shape, torch.float32, f"axis = {n - 2}")
        col = conv.emit("iota", [], shape, torch.float32, f"axis = {n - 1}")
        keep = conv.emit("ge", [row, col], shape, torch.bool)
        low = conv.constant(torch.finfo(torch.float32).min, shape, s.dtype)
        s = conv.emit("select", [keep, s, low], shape, s.dtype)
    w = conv.emit("softmax", [s], shape, s.dtype, f"axis = {len(shape) - 1}", meta={"axis": len(shape) - 1})
    return conv.emit("matmul", [conv.dropout(w, p), v], q.shape[:-1] + (v.shape[-1],), q.dtype)


def _reference(q, k, v, causal, scale):
    s = (q.double() @ k.double().transpose(-1, -2)) * scale
    if causal:
        tq, tk = s.shape[-2], s.shape[-1]
        keep = torch.ones(tq, tk, dtype=torch.bool, device=s.device).tril(tk - tq)
        s = s.masked_fill(~keep, float("-inf"))
    return torch.softmax(s, dim=-1) @ v.double()


def _agrees(got, want):
    if not torch.isfinite(want).all():
        return False
    scale = max(want.abs().max().item(), 1e-30)
    return (got.double() - want.double()).abs().max().item() <= 1e-4 * scale + 1e-6


def match_softmax_attention(conv, out, P, V):
    """The composite for matmul(P, V) when P is softmax(masked, scaled Q K^T), else None."""
    if len(P.shape) < 3 or P.name not in conv.defs:
        return None
    # P back to the softmax over its last axis, through regroupings (order-preserving
    # reshapes and permutes) that end in the same [Tq, Tk] rows.
    cur = P
    while True:
        d = _def(conv, cur)
        if d is None:
            return None
        if d.op == "softmax" and d.meta.get("axis") == len(cur.shape) - 1 and cur.shape[-2:] == P.shape[-2:]:
            cur = d.operands[0]
            break
        if d.op not in ("reshape", "permute") or not _order_preserving(d):
            return None
        cur = d.operands[0]
    # The softmax's input back to the score matmul.
    scale, masked = 1.0, False
    while True:
        d = _def(conv, cur)
        if d is None:
            return None
        ops = d.operands
        if d.op == "cast" or (d.op in ("reshape", "permute") and _order_preserving(d)):
            cur = ops[0]
        elif d.op in ("mul", "div"):
            c = _splat(conv, ops[1]) if _static(conv, ops[1]) else None
            if c is None and d.op == "mul" and _static(conv, ops[0]):
                c, ops = _splat(conv, ops[0]), [ops[1], ops[0]]
            if c is None or c == 0 or not math.isfinite(c):
                return None
            scale = scale * c if d.op == "mul" else scale / c
            cur = ops[0]
        elif d.op == "select" and _static(conv, ops[0]):
            # masked_fill(mask, -inf) or where(keep, s, -inf)
            if _splat(conv, ops[1]) == float("-inf") and not _static(conv, ops[2]):
                cur = ops[2]
            elif _splat(conv, ops[2]) == float("-inf") and not _static(conv, ops[1]):
                cur = ops[1]
            else:
                return None
            masked = True
        elif d.op == "add" and (_static(conv, ops[0]) != _static(conv, ops[1])):
            cur = ops[1] if _static(conv, ops[0]) else ops[0]
            masked = True
        elif d.op == "matmul" and d.attrs == "" and cur.shape[-2:] == P.shape[-2:]:
            break
        else:
            return None
    A, Bt = d.operands
    if len(A.shape) != len(P.shape) or A.shape[:-2] != Bt.shape[:-2] or A.shape[:-2] != V.shape[:-2]:
        return None
    if any(x.name not in conv.realv for x in (A, Bt, V)):
        return None
    # The hypothesis, checked on the example: o = softmax(A Bt * scale, causal if masked) V.
    a, bt, v = conv.realv[A.name], conv.realv[Bt.name].transpose(-1, -2), conv.realv[V.name]
    want = _reference(a, bt, v, masked, scale)
    if not _agrees(out, want):
        return None
    # A mask is taken for the causal one only where the example tells them apart: an example
    # on which masking changes nothing (V the same for every key, as from a zero-initialised
    # projection, or weights on the diagonal alone) would agree with any mask. The torch.compile
    # backend's examples are the first call's real tensors, which can be such.
    if masked and _agrees(out, _reference(a, bt, v, False, scale)):
        return None
    # The operands in their own layout ([B, H, T, d] rather than the bmm's [B*H, T, d]): the
    # deepest batch shape that all three were regrouped from.
    qs = _candidates(conv, A, A.shape[-2:])
    ks = _untransposed(conv, Bt)
    vs = _candidates(conv, V, V.shape[-2:])
    q = k = v = None
    for cq in reversed(qs):
        ck = [c for c in ks if c.shape[:-2] == cq.shape[:-2]]
        cv = [c for c in vs if c.shape[:-2] == cq.shape[:-2]]
        if ck and cv:
            q, k, v = cq, ck[-1], cv[-1]
            break
    if q is None:
        q, k, v = A, conv.reshape(ks[-1], A.shape[:-2] + ks[-1].shape[-2:]), V
    o, _ = emit(conv, q, k, v, masked, scale)
    return conv.reshape(o, out.shape)


def sdpa(conv, out, q, k, v, mask, dropout_p, is_causal, scale):
    """scaled_dot_product_attention(q, k, v, ...) as the composite: (o shaped as `out`, lse)."""
    if dropout_p and not conv.train_dropout:
        raise ExportError("unsupported op scaled_dot_product_attention with dropout_p > 0 (export in eval mode)")
    if dropout_p and conv.dropout_masks:  # the backend: its backward graph has SDPA's own backward, with dropout
        raise ExportError("unsupported op scaled_dot_product_attention with dropout_p > 0 (fusec's attention has no "
                          "dropout)")
    qv, kv, vv = conv.value(q), conv.value(k), conv.value(v)
    tq, tk = qv.shape[-2], kv.shape[-2]
    scale = 1 / math.sqrt(qv.shape[-1]) if scale is None else float(scale)
    causal = causal_of(conv, mask, is_causal, tq, tk)
    if dropout_p:
        return conv.reshape(with_dropout(conv, qv, kv, vv, causal, scale, float(dropout_p)), out.shape), None
    o, lse = emit(conv, qv, kv, vv, causal, scale)
    return conv.reshape(o, out.shape), lse


def causal_of(conv, mask, is_causal, tq, tk):
    """Whether SDPA with `mask` (None, or a static boolean or additive mask) and `is_causal` is
    causal attention; ExportError for any other mask. The forward's and the backward's SDPA
    ops (convert.py) decide alike."""
    causal = bool(is_causal)
    if mask is not None:
        what = "unsupported op scaled_dot_product_attention with a mask that is not a static causal mask"
        if causal:
            raise ExportError(f"{what} (a mask and is_causal=True together)")
        if mask not in conv.static:
            raise ExportError(f"{what} (the mask is computed from the inputs)")
        m = conv.real[mask].cpu()
        keep = torch.ones(tq, tk, dtype=torch.bool).tril(tk - tq)
        if m.dtype == torch.bool:
            allowed = m
        else:
            allowed = m == 0
            # Libraries fill the masked entries with finfo(dtype).min of the dtype they build the
            # mask in (transformers under bf16 autocast: float16's, -65536 once rounded to
            # bf16): anything at or below float16's lowest weighs exp(-65504) = 0 in softmax,
            # as -inf does, unless a score exceeds 65000.
            odd = ~((m == 0) | (m <= torch.finfo(torch.float16).min))
            if bool(odd.any()):
                seen = ", ".join(f"{v:g}" for v in m[odd].float().unique()[:3].tolist())
                raise ExportError(f"{what} (a {m.dtype} mask with values other than 0 and -inf: {seen})")
        allowed = allowed.expand(*m.shape[:-2], tq, tk)
        if bool(allowed.all()):
            causal = False
        elif bool((allowed == keep).all()):
            causal = True
        else:
            raise ExportError(f"{what} (a static mask of another pattern)")
    if causal and tq != tk:  # torch aligns the causal mask top-left, fusec bottom-right
        raise ExportError("unsupported op scaled_dot_product_attention causal with queries and keys of different lengths")
    return causal
