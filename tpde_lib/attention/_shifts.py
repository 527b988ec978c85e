r"""The row shifts of the exponential kernels of :func:`._kernels.kernel_sums`.

A sum :math:`\sum_j e^{S_{ij}}\,v_j` is computed as :math:`e^{M_i}\sum_j e^{S_{ij}-M_i}\,v_j`
with a shift :math:`M_i` close above the row maximum, so that no term overflows and the largest
ones keep full relative precision. This module decides the shifts from the data alone, before the
row blocks run: none at all when every score is small (:func:`_unshifted`), else upper bounds of
the row maxima from a ball around the keys (:func:`_shift_bounds`), and which row blocks need
their exact maxima because the bound may be too loose (:func:`_loose_blocks`).
"""

from __future__ import annotations

import numpy as np

#: largest gap U_i - L_i (upper bound of the row maximum minus a lower bound) for which the
#: bound U_i is used as the shift of an exponential kernel. The largest term is then at least
#: e^-200 ~ 1e-87 and every term that counts (within 40 of it) at least e^-240 ~ 1e-104: all are
#: normal numbers (> 2e-308), with full relative precision; the shift adds at most
#: (p + 1) 200 2^-53 (4e-13 for p = 16) to the exponent's rounding error. With 60 the sampled
#: check ran for every call at d = 16 (0.08 ms of 1.5 at n = 1000, measured)
_MAX_GAP = 200.0
#: "exp" returns its shift M: above this, e^M would overflow, so the exact maximum is used
_EXP_SHIFT_MAX = 700.0
#: evenly spaced keys (besides the extreme ones) scored to bound the row maxima from below
_SAMPLE_KEYS = 32


def _shift_bounds(Q, keys, cnt, qq=None):
    r"""Upper bounds :math:`U_i \ge \max_{j < c_i} q_i\cdot k_j` (all keys if ``cnt`` is None), and
    lower bounds :math:`L_i \le` the same maximum: :math:`U_i, L_i = q_i\cdot z \pm |q_i|\,r_i`,
    where ``z`` is the mean of the keys and :math:`r_i` the largest distance to ``z`` of a key
    the row sees (keys sorted by position when masked), since every such key has
    :math:`|q_i\cdot k - q_i\cdot z| \le |q_i|\,|k - z|`. O((n + m) p), in five passes over
    the (n, p) and (m, p) arrays: a pass costs as much as its arithmetic here, the operands
    having left the caches during the previous call's tiles (measured: 75 against 108 us at
    n = 1000, d = 16 for the former minimum of this ball bound and the bounding-box bound).
    Computed for all rows before the blocks run: each block computing its own rows' bounds and
    query tile was slower (whole call 1.29 against 1.17 ms, same machine and size). ``qq``:
    the squared row norms of ``Q`` when the caller has them (:func:`_unshifted` needs them too).
    """
    m = keys.shape[0]
    centre = np.ones(m) @ keys
    centre /= m
    diff = keys - centre
    radius2 = np.einsum("ij,ij->i", diff, diff)
    qc, reach = Q @ centre, np.einsum("ij,ij->i", Q, Q) if qq is None else qq
    if cnt is None:
        reach = np.sqrt(reach * radius2.max())
    else:
        reach = np.sqrt(reach * np.maximum.accumulate(radius2)[np.maximum(cnt - 1, 0)])
    return qc + reach, qc - reach


def _unshifted(queries, keys, values, qq=None):
    r"""Whether ``"softmax"`` sums can do without a shift: :math:`|q_i\cdot k_j| \le
    \max_i|q_i|\,\max_j|k_j| \le` ``_MAX_GAP`` for every score (so each row's largest term is
    at least :math:`e^{-200}`, all terms within 40 of it are normal numbers, and none exceeds
    :math:`e^{200}`), and :math:`m\max|\mathrm{values}| \le 10^{200}`, so that no sum comes
    near overflow (at most :math:`e^{200}\,10^{200} < 10^{287}`). False for NaN or inf.
    ``qq``: the squared row norms of ``queries``, as for :func:`_shift_bounds`."""
    if qq is None:
        qq = np.einsum("ij,ij->i", queries, queries)
    q2 = qq.max(initial=0.0)  # (no query: 0)
    k2 = np.einsum("ij,ij->i", keys, keys).max(initial=0.0)
    return bool(q2 * k2 <= _MAX_GAP**2 and keys.shape[0] * np.abs(values).max(initial=0.0) <= 1e200)


def _sample_keys(keys):
    """Indices (sorted) of the keys extreme along each coordinate and of evenly spaced keys."""
    keys_t = np.ascontiguousarray(keys.T)  # numpy reduces a short axis slowly: a copy
    m = keys_t.shape[1]
    idx = np.concatenate(
        [
            keys_t.argmax(axis=1),
            keys_t.argmin(axis=1),
            np.linspace(0, m - 1, min(m, _SAMPLE_KEYS)).astype(np.intp),
        ]
    )
    return np.unique(idx)


def _loose_blocks(Q, keys, cnt, U, low, kind, rows):
    """For each row block of ``rows`` queries, whether its shift bound ``U`` may be far from the
    row maxima (or too large for ``"exp"``), so that it needs the exact maxima: shape (nblocks,).

    First the free lower bounds ``low`` of :func:`_shift_bounds`; where they leave a gap above
    ``_MAX_GAP``, the scores of a sample of keys (the extreme ones along each coordinate and
    evenly spaced ones, those a row sees) and of each row's last visible key, for all rows in a
    few products. Rows that see no key never count. Decided before the blocks run, from the data
    alone: the blocks then hold the GIL for no such small computations (measured, n = 1000,
    d = 16: the same check inside the blocks took 50 to 215 us a block on two threads).
    """
    gap = U - low
    if cnt is not None:
        gap = np.where(cnt > 0, gap, -np.inf)
    widest = np.max(gap, initial=-np.inf)
    nblocks = -(-Q.shape[0] // rows)
    if widest <= _MAX_GAP and (kind != "exp" or np.max(U, initial=0.0) <= _EXP_SHIFT_MAX):
        return np.zeros(nblocks, dtype=bool)  # the usual case: every bound is tight
    if widest > _MAX_GAP:
        samples = _sample_keys(keys)
        sk = keys[samples]
        step = max(1, (1 << 18) // samples.size)  # (s, step) scores at a time
        for r0 in range(0, Q.shape[0], step):
            q = Q[r0 : r0 + step]
            if not np.any(gap[r0 : r0 + step] > _MAX_GAP):
                continue
            sc = sk @ q.T  # (s, r) lower bounds
            best = low[r0 : r0 + step]
            if cnt is not None:
                c = cnt[r0 : r0 + step]
                sc[samples[:, None] >= c[None, :]] = -np.inf
                last = keys[np.maximum(c - 1, 0)]  # the last visible key
                best = np.maximum(best, np.einsum("ij,ij->i", q, last))
            # (the minimum keeps -inf for the rows that see no key)
            gap[r0 : r0 + step] = np.minimum(
                gap[r0 : r0 + step], U[r0 : r0 + step] - np.maximum(best, sc.max(axis=0))
            )
    need = gap > _MAX_GAP
    if kind == "exp":
        need |= (U > _EXP_SHIFT_MAX) & (gap > -np.inf)
    return np.logical_or.reduceat(need, np.arange(0, Q.shape[0], rows)) if need.size else need
