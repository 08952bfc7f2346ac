"""Fits the rational erf approximation of engine/src/ggml/cpu_ops.rs (ERF_P, ERF_Q):
erf(x) ~ x P(x^2) / Q(x^2) on [0, 4], P of degree 7 and Q of degree 4 in x^2, by
iteratively reweighted linear least squares toward the minimax error, then checks the
largest error of the f32 evaluation. Needs numpy.

Usage: python3 engine/tools/fit_erf.py
"""
from math import erf

import numpy as np

NP, NQ = 7, 4


def fit():
    x = np.linspace(1e-5, 4.0, 80001)
    e = np.array([erf(v) for v in x])
    u = x * x / 16  # scaled so the powers stay well conditioned
    weights, q_values, best = np.ones_like(x), np.ones_like(x), None
    for _ in range(60):
        a = np.hstack([np.stack([x * u**i for i in range(NP + 1)], 1),
                       np.stack([-e * u**i for i in range(1, NQ + 1)], 1)])
        w = (weights / q_values)[:, None]
        c, *_ = np.linalg.lstsq(a * w, e * w[:, 0], rcond=None)
        p, q = c[:NP + 1], np.concatenate([[1.0], c[NP + 1:]])
        q_values = np.polyval(q[::-1], u)
        err = x * np.polyval(p[::-1], u) / q_values - e
        worst = np.abs(err).max()
        if q_values.min() > 0 and (best is None or worst < best[0]):
            best = (worst, p.copy(), q.copy())
        weights = weights * (1 + np.abs(err) / worst) ** 0.5
    _, p, q = best
    return (np.array([p[i] / 16**i for i in range(NP + 1)], np.float32),
            np.array([q[i] / 16**i for i in range(NQ + 1)], np.float32))


def horner(coeffs, t):
    acc = np.full_like(t, coeffs[-1])
    for c in coeffs[-2::-1]:
        acc = (acc * t + c).astype(np.float32)
    return acc


def main():
    p, q = fit()
    x = np.linspace(-6, 6, 1200001).astype(np.float32)
    xc = np.clip(x, np.float32(-4), np.float32(4))
    t = xc * xc
    approx = np.clip(xc * horner(p, t) / horner(q, t), -1, 1)
    exact = np.array([erf(float(v)) for v in x])
    print("ERF_P", [float(v) for v in p])
    print("ERF_Q", [float(v) for v in q])
    print("largest error of the f32 evaluation:", np.abs(approx - exact).max())


if __name__ == "__main__":
    main()
