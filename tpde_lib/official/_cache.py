r"""The authors' full histogram protocol, computed once and committed, with a check against the code.

The full protocol (:func:`~tpde_lib.official.paper_histogram_ranks` on the twelve panels: 14.9
million Euler iterations, up to 90000 per run, 665 retries) takes minutes, more than a page
that runs in CI should spend. Its result is stored in ``data/histograms.json`` (written by
:func:`write_histogram_cache`, run by ``python -m tpde_lib.official._cache``, which computes
the panels missing from the file); :func:`load_histogram_cache` reads it and
:func:`check_cached_histogram` re-runs chosen entries with the code and compares. The settings
of each panel are stored with it and compared on loading, so a change of the code's settings
cannot be read against a stale cache.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .._checks import as_count, as_index, as_instance, as_ndarray
from ..gaussian import covariance_rhs
from ._histograms import (
    HistogramRun,
    HistogramSetting,
    _RankCounts,
    histogram_inits,
    histogram_setting,
    paper_histogram_ranks,
)
from ._runs import run_paper_euler

#: Where the cached protocol results live.
HISTOGRAM_CACHE = Path(__file__).parent / "data" / "histograms.json"

#: The twelve panels of the authors' two histogram figures.
PANELS = tuple((v, k, d) for v in ("softmax", "L2") for k in ("identity", "random") for d in (3, 4, 5))


def _key(variant, V_kind, d):
    return f"{variant}/{V_kind}/{d}"


def _settings_record(s):
    e = s.euler
    return {
        "h": e.h,
        "tol_low": e.tol_low,
        "tol_high": e.tol_high,
        "max_iter": e.max_iter,
        "n_max": s.n_max,
        "tol_rank": s.tol_rank,
        "n_draws": int(s.Q.shape[0]),
    }


@dataclass(frozen=True)
class CachedPanel(_RankCounts):
    """The stored result of the authors' protocol on one panel (fields as :class:`HistogramRun`).

    Attributes
    ----------
    variant, V_kind : str
    d : int
    draw_init, euler_rank, n_steps : ndarray of int, shape (m,)
    counted : ndarray of bool, shape (m,)
    eigenvalues : ndarray, shape (m, d)
        Eigenvalues (ascending) of the converged iterates.
    failed_draw, failed_init, failed_steps : ndarray of int, shape (f,)
    failed_status : ndarray of str, shape (f,)
    attempts : int
    rank_margin : float
    """

    variant: str
    V_kind: str
    d: int
    draw_init: np.ndarray
    euler_rank: np.ndarray
    counted: np.ndarray
    n_steps: np.ndarray
    eigenvalues: np.ndarray
    failed_draw: np.ndarray
    failed_init: np.ndarray
    failed_steps: np.ndarray
    failed_status: np.ndarray
    attempts: int
    rank_margin: float


def _panel_record(setting: HistogramSetting, run: HistogramRun) -> dict:
    """The JSON record of one panel: its settings and the :class:`HistogramRun` fields."""
    r = run
    return {
        "settings": _settings_record(setting),
        "draw_init": r.draw_init.tolist(),
        "euler_rank": r.euler_rank.tolist(),
        "counted": r.counted.tolist(),
        "n_steps": r.n_steps.tolist(),
        "eigenvalues": np.linalg.eigvalsh(r.finals).tolist(),
        "failed_draw": r.failed_draw.tolist(),
        "failed_init": r.failed_init.tolist(),
        "failed_steps": r.failed_steps.tolist(),
        "failed_status": r.failed_status.tolist(),
        "attempts": r.attempts,
        "rank_margin": r.rank_margin,
    }


def _as_panels(panels):
    """``panels`` as a list of ``(variant, V_kind, d)`` triples (each checked by
    :func:`histogram_setting` when it is run), else ``TypeError``/``ValueError`` naming it."""
    if isinstance(panels, (str, bytes)) or not isinstance(panels, Iterable):
        raise TypeError(
            f"panels must be a sequence of (variant, V_kind, d) triples, got {type(panels).__name__}"
        )
    out = []
    for k, p in enumerate(panels):
        if isinstance(p, (str, bytes)) or not isinstance(p, Sequence) or len(p) != 3:
            raise ValueError(f"panels[{k}] must be a triple (variant, V_kind, d), got {p!r:.60}")
        out.append(tuple(p))
    return out


def _as_path(path):
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike (a file), got {type(path).__name__}")
    return Path(path)


def write_histogram_cache(
    path: str | os.PathLike = HISTOGRAM_CACHE,
    panels: Sequence[tuple[str, str, int]] = PANELS,
    runs: dict | None = None,
    log: Callable | None = print,
) -> None:
    """Run the full protocol on the ``panels`` missing from the cache (minutes) and write it.

    Panels already stored in ``path`` with the code's current settings are kept as they are;
    ``runs`` (optional) maps ``(variant, V_kind, d)`` to :class:`HistogramRun` results already
    computed with :func:`paper_histogram_ranks`; the other panels are computed here.
    """
    if runs is not None and not isinstance(runs, Mapping):
        raise TypeError(
            f"runs must be None or a dict {{(variant, V_kind, d): HistogramRun}}, got {type(runs).__name__}"
        )
    runs = {} if runs is None else dict(runs)
    for key, run in runs.items():
        as_instance(f"runs[{key!r}]", run, HistogramRun, "a HistogramRun (from paper_histogram_ranks)")
    path = _as_path(path)
    panels = _as_panels(panels)
    if log is not None and not callable(log):
        raise TypeError(f"log must be a callable (e.g. print) or None, got {type(log).__name__}")
    out = json.loads(path.read_text()) if path.exists() else {}
    for variant, V_kind, d in panels:
        s = histogram_setting(variant, V_kind, d)
        key = _key(variant, V_kind, d)
        if key in out and out[key]["settings"] == _settings_record(s):
            continue
        r = runs.get((variant, V_kind, d))
        if r is None:
            r = paper_histogram_ranks(s)
        out[key] = _panel_record(s, r)
        if log is not None:
            log(
                f"{variant} {V_kind} d={d}: counts {r.counts().tolist()}, "
                f"{r.failures} failures, {r.exceptions} exceptions"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(out) + "\n")  # after each panel: minutes of work each


def load_histogram_cache(
    path: str | os.PathLike = HISTOGRAM_CACHE,
) -> dict[tuple[str, str, int], CachedPanel]:
    """The cached panels, ``{(variant, V_kind, d): CachedPanel}``.

    Parameters
    ----------
    path : str or os.PathLike
        A JSON file written by :func:`write_histogram_cache` (default: the committed one).

    Raises
    ------
    TypeError
        ``path`` is not a path.
    ValueError
        The file is not a histogram cache (names the file and the entry), or a panel's stored
        settings differ from :func:`histogram_setting` (stale cache).
    """
    path = _as_path(path)
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"path {str(path)!r} is not a histogram cache (not JSON: {exc})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"path {str(path)!r} is not a histogram cache (a JSON object of panels)")
    out = {}
    for key, rec in raw.items():
        try:
            out[_panel_key(key)] = _cached_panel(key, rec)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            if "stale histogram cache" in str(exc):
                raise
            raise ValueError(
                f"path {str(path)!r} is not a valid histogram cache: entry {key!r} "
                f"({type(exc).__name__}: {exc})"
            ) from None
    return out


def _panel_key(key):
    variant, V_kind, d = key.split("/")
    return variant, V_kind, int(d)


def _cached_panel(key, rec):
    """One JSON record as a :class:`CachedPanel` (its settings checked against the code's)."""
    variant, V_kind, d = _panel_key(key)
    want = _settings_record(histogram_setting(variant, V_kind, d))
    if rec["settings"] != want:
        raise ValueError(
            f"stale histogram cache for {key}: stored settings {rec['settings']}"
            f" differ from the code's {want}; rerun write_histogram_cache()"
        )
    ints = {
        f: np.array(rec[f], dtype=int)
        for f in ("draw_init", "euler_rank", "n_steps", "failed_draw", "failed_init", "failed_steps")
    }
    return CachedPanel(
        variant,
        V_kind,
        d,
        ints["draw_init"],
        ints["euler_rank"],
        np.array(rec["counted"], dtype=bool),
        ints["n_steps"],
        np.array(rec["eigenvalues"], dtype=float).reshape(-1, d),
        ints["failed_draw"],
        ints["failed_init"],
        ints["failed_steps"],
        np.array(rec["failed_status"], dtype=str),
        int(rec["attempts"]),
        float(rec["rank_margin"]),
    )


@dataclass(frozen=True)
class CacheCheck:
    """Result of :func:`check_cached_histogram`.

    Attributes
    ----------
    n_runs : int
        Runs recomputed.
    mismatches : list of str
        Entries whose status, step count or rank differ (empty when the cache matches).
    max_eig_diff : float
        Largest difference of a recomputed eigenvalue from the stored one.
    pairing_ok : bool
        The stored initial conditions follow the protocol's pairing (draw ``i`` uses initial
        condition ``i`` + the number of failures before it, each failure its own).
    """

    n_runs: int
    mismatches: list
    max_eig_diff: float
    pairing_ok: bool


def _pairing_ok(p):
    """Walk the protocol from the stored failures and compare the initial conditions."""
    fails = sorted(zip(p.failed_init.tolist(), p.failed_draw.tolist()))
    fail_at = dict(fails)
    i = k = 0
    inits = []
    while i < p.draw_init.size:
        if k in fail_at:
            if fail_at[k] != i:
                return False
        else:
            inits.append(k)
            i += 1
        k += 1
    return inits == p.draw_init.tolist() and k == p.attempts


def _indices(name, values, length):
    values = np.atleast_1d(as_ndarray(name, values))
    return [as_index(f"{name}[{m}]", v, length) for m, v in enumerate(values.tolist())] if values.size else []


def check_cached_histogram(
    panel: CachedPanel, draws: Sequence[int] = (), failed: Sequence[int] = (), chunk: int = 400
) -> CacheCheck:
    r"""Recompute chosen entries of a cached panel with the code and compare.

    Parameters
    ----------
    panel : CachedPanel
    draws : sequence of int
        Processed draws to recompute (their converged run: same status, steps and rank; the
        eigenvalues to round-off).
    failed : sequence of int
        Indices into the failed attempts to recompute (same status and steps).
    chunk : int
        Iterations per batched call (speed only).

    Returns
    -------
    CacheCheck
    """
    as_instance("panel", panel, CachedPanel, "a CachedPanel (from load_histogram_cache)")
    chunk = as_count("chunk", chunk, 1)
    s = histogram_setting(panel.variant, panel.V_kind, panel.d)
    draws = _indices("draws", draws, panel.draw_init.size)
    failed = _indices("failed", failed, panel.failed_draw.size)
    pairs = [(i, int(panel.draw_init[i])) for i in draws]
    pairs += [(int(panel.failed_draw[j]), int(panel.failed_init[j])) for j in failed]
    mismatches = []
    max_diff = 0.0
    if pairs:
        atts = s.attentions()
        members = np.array([p[0] for p in pairs])
        inits = histogram_inits(s.d, max(p[1] for p in pairs) + 1)[[p[1] for p in pairs]]
        res = run_paper_euler(
            lambda idx: covariance_rhs([atts[b] for b in members[idx]]),
            inits,
            s.euler,
            record_every=10**9,
            chunk=chunk,
        )
        lam = np.linalg.eigvalsh(res.last)
        for m, (draw, init) in enumerate(pairs):
            if m < len(draws):
                want = ("converged", int(panel.n_steps[draws[m]]))
                rank = int(np.sum(lam[m] > s.tol_rank))
                if rank != int(panel.euler_rank[draws[m]]):
                    mismatches.append(f"draw {draw}: rank {rank} != cached {panel.euler_rank[draws[m]]}")
                max_diff = max(max_diff, float(np.abs(lam[m] - panel.eigenvalues[draws[m]]).max()))
            else:
                j = failed[m - len(draws)]
                want = (str(panel.failed_status[j]), int(panel.failed_steps[j]))
            got = (str(res.status[m]), int(res.n_steps[m]))
            if got != want:
                mismatches.append(f"draw {draw}, init {init}: {got} != cached {want}")
    return CacheCheck(len(pairs), mismatches, max_diff, _pairing_ok(panel))


if __name__ == "__main__":
    write_histogram_cache()
