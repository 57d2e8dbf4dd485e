"""Float64 references written from docs/reference.md (never posenc's code) for ALiBi and sinusoidal
tables; RoPE's are in tests/engine/rope_refs.py."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from tests.numeric import EPS64, angle_slack


def slopes64(n, max_bias=8.0):
    """Press et al. (ALiBi) slopes in float64, docs/reference.md: 2^(−max_bias·j/c) for the largest power
    of two c <= n, then every other one of the 2c-head sequence."""
    c = 2 ** math.floor(math.log2(n))
    s = [2.0 ** (-max_bias * j / c) for j in range(1, c + 1)]
    s += [2.0 ** (-max_bias * j / (2 * c)) for j in range(1, 2 * (n - c), 2)]
    return np.array(s[:n])


def bias64(slopes, query, key, mode="causal"):
    """−m·(i − j) (or −m·|i − j|) in float64: the paper's formula, whose float64 value is then
    rounded once to the output dtype (docs/reference.md), so outputs are compared with it exactly."""
    i = np.asarray(query, dtype=np.float64)[None, :, None]
    j = np.asarray(key, dtype=np.float64)[None, None, :]
    dist = np.abs(i - j) if mode == "symmetric" else (i - j)
    return -slopes[:, None, None] * dist


def sinusoidal64(d, positions, layout, base=10000.0, offset=0):
    """Float64 encoding from docs/reference.md, and the reference's own error (numeric.angle_slack)."""
    p = np.asarray(positions, dtype=np.float64)[:, None] + offset
    if layout == "interleaved":
        j = np.arange(d)
        e = (2.0 * (j // 2)) / d
        ang = p * base**-e
        return np.where(j % 2 == 0, np.sin(ang), np.cos(ang)), angle_slack(ang, e, base)
    if layout == "concat":
        ns, nc = (d + 1) // 2, d // 2
        e = np.concatenate([2.0 * np.arange(ns) / d, 2.0 * np.arange(nc) / d])
        ang = p * base**-e
        return np.concatenate([np.sin(ang[:, :ns]), np.cos(ang[:, ns:])], 1), angle_slack(ang, e, base)
    if layout in ("fairseq", "fairseq_cos_first"):
        h = d // 2
        e = np.arange(h) / (h - 1)
        ang = p * base**-e
        enc, slack = [np.sin(ang), np.cos(ang)], [angle_slack(ang, e, base)] * 2
        if layout == "fairseq_cos_first":  # MusicGen: [cos | sin]
            enc = enc[::-1]
        if d % 2:
            enc.append(np.zeros((len(positions), 1)))
            slack.append(np.zeros((len(positions), 1)))
        return np.concatenate(enc, 1), np.concatenate(slack, 1)
    raise AssertionError(layout)


# --------------------------------------------------------------------------- sinusoidal-grid
def one_d(coords, width):
    """[sin(c·ω) | cos(c·ω)], ω_j = 10000^(−j/(width/2)), and the reference's own error."""
    half = width // 2
    ang = np.multiply.outer(np.asarray(coords, np.float64), 10000.0 ** (-np.arange(half) / half))
    slack = (np.abs(ang) * (np.log(10000.0) + 4) + 2) * EPS64
    return np.concatenate([np.sin(ang), np.cos(ang)], 1), np.concatenate([slack, slack], 1)


def coord(i, n, base, scale):
    step = 1 / Fraction(scale) if base is None else Fraction(base) / (n * Fraction(scale))
    return float(i * step)


def grid64(d, h, w, base=None, scale=1.0, frames=None, tscale=1.0, extra=0, rows=None):
    """The table in float64 (rows: extra zeros, then t-major, h-major), and its slack: every row,
    or only ``rows`` (row numbers of the whole table), in their order."""
    spatial = d if frames is None else 3 * d // 4
    out, slacks = [], []
    for r in range(extra + (frames or 1) * h * w) if rows is None else rows:
        if r < extra:
            out.append(np.zeros((1, d)))
            slacks.append(np.zeros((1, d)))
            continue
        t, k = divmod(r - extra, h * w)
        i, j = divmod(k, w)
        parts = [] if frames is None else [one_d([coord(t, 0, None, tscale)], d // 4)]
        parts += [
            one_d([coord(j, w, base, scale)], spatial // 2),
            one_d([coord(i, h, base, scale)], spatial // 2),
        ]
        out.append(np.concatenate([p[0] for p in parts], 1))
        slacks.append(np.concatenate([p[1] for p in parts], 1))
    if not out:
        return np.zeros((0, d)), np.zeros((0, d))
    return np.concatenate(out), np.concatenate(slacks)
