"""tpde_lib.trained: a trained BERT encoder (all-MiniLM-L6-v2) read into the book's conventions.

Checked against two independent references: the similarities that sentence-transformers'
documentation publishes for this model, and the outputs of ``tools/trained_reference.py`` (a
float32 forward pass written from the BERT equations with its own safetensors reader and
WordPiece tokenizer), stored in ``tests/data/trained_reference.npz``.
"""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

# the library's own install (the wheel alone) has neither reader: nothing to test there
pytest.importorskip("tokenizers")
pytest.importorskip("safetensors")

import tpde_lib as tp  # noqa: E402
import tpde_lib.trained as tt  # noqa: E402

REFERENCE = Path(__file__).parent / "data" / "trained_reference.npz"
# sentences used neither by the reference nor by the chapter
UNSEEN = ("Gaussians stay Gaussian under affine maps.", "Does a trained model cluster its tokens?")


@pytest.fixture(scope="module")
def enc():
    return tt.load_encoder()


def test_bundled_model_and_checksum(enc):
    assert enc.sha256 == tt.BUNDLED_SHA256
    assert (len(enc.layers), enc.d, enc.heads, enc.max_tokens) == (6, 384, 12, 512)
    assert enc.path == tt.bundled_model_dir()


def test_hidden_states_contract(enc):
    h = enc.hidden_states(UNSEEN[0])
    tokens, _ = enc.tokenize(UNSEEN[0])
    assert h.dtype == np.float64 and h.shape == (7, len(tokens), 384)
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
    states = enc.forward(UNSEEN[0])
    assert np.array_equal(states.hidden, h)
    assert np.array_equal(states.feedforward[-1], h[-1])


def test_bitwise_deterministic(enc):
    first = enc.hidden_states(UNSEEN[1])
    assert np.array_equal(first, enc.hidden_states(UNSEEN[1]))
    assert np.array_equal(first, tt.load_encoder().hidden_states(UNSEEN[1]))


def test_matches_independent_reference(enc):
    """Tokens identical; states within 2e-5 of the float32 reference (measured: 1.9e-6 at most,
    on coordinates up to 10.5; float32's relative round-off 6e-8 grows through the 6 layers'
    sums of 384 and 1536 terms). A wrong GELU (the tanh approximation) moves them by 3e-3."""
    ref = np.load(REFERENCE)
    assert len(ref["sentences"]) == 3
    for i, text in enumerate(ref["sentences"]):
        states = enc.forward(str(text))
        assert states.tokens == tuple(str(t) for t in ref[f"tokens_{i}"])
        assert np.array_equal(states.ids, ref[f"ids_{i}"])
        gap = np.abs(states.hidden - ref[f"hidden_{i}"].astype(np.float64)).max()
        assert gap < 2e-5, (text, gap)


def test_published_similarities(enc):
    """sentence-transformers' documentation (quickstart, all-MiniLM-L6-v2): cosine similarities
    0.6660, 0.1046, 0.1411 of the mean-pooled, normalised embeddings, printed to 4 decimals:
    ours must round to them (|gap| <= 5e-5, plus 1e-6 for the documentation's float32)."""
    texts = ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."]
    E = np.array([enc.embedding(t) for t in texts])
    S = E @ E.T
    published = {(0, 1): 0.6660, (0, 2): 0.1046, (1, 2): 0.1411}
    for (i, j), value in published.items():
        assert abs(S[i, j] - value) <= 5e-5 + 1e-6, ((i, j), S[i, j])


def test_attention_is_the_multihead_field(enc):
    """At every layer, on the model's own states for sentences the reference never saw, the
    library's MultiHead field in homogeneous coordinates equals the sub-block's update to
    round-off (relative 1e-12; a dropped query bias changes it by order 1)."""
    for text in UNSEEN:
        states = enc.forward(text)
        inputs = np.concatenate([states.embeddings[None], states.feedforward[:-1]])
        for layer, x in zip(enc.layers, inputs):
            direct = layer.attention(x)
            field = layer.multihead().velocity(tp.Empirical(tt.lift(x)))
            assert np.all(field[:, -1] == 0.0)
            assert np.abs(field[:, :-1] - direct).max() <= 1e-12 * np.abs(direct).max()
            assert np.allclose(layer.norm1(x + direct), layer.attention_block(x), atol=0, rtol=0)


def test_score_and_value_matrices(enc):
    """A_h, V_h and the bias terms against the projections, on random tokens."""
    layer = enc.layers[2]
    rng = np.random.default_rng(0)
    x, y1, y2 = rng.standard_normal((3, 384))
    k = layer.head_dim
    A, V, c = layer.score_matrices(), layer.value_matrices(), layer.key_bias
    for h in (0, 7, 11):
        rows = slice(h * k, (h + 1) * k)
        q = layer.query[rows] @ x + layer.query_bias[rows]

        def score(y, h=h, rows=rows, q=q):
            return q @ (layer.key[rows] @ y + layer.key_bias_in[rows]) / np.sqrt(k)

        def book(y, h=h):
            return y @ A[h] @ x + c[h] @ y

        # the terms left out of A_h and c_h do not depend on the key: they cancel in the softmax
        assert abs((score(y1) - book(y1)) - (score(y2) - book(y2))) < 1e-10
        out = layer.output[:, rows] @ (layer.value[rows] @ y1 + layer.value_bias[rows])
        assert np.allclose(V[h] @ y1 + layer.value_offsets[h], out, rtol=1e-12, atol=1e-12)


def test_run_from_states(enc):
    states = enc.forward(UNSEEN[0])
    again = enc.run(states.embeddings)
    assert np.array_equal(again.hidden, states.hidden) and again.tokens == ()
    gauss = enc.run(np.random.default_rng(1).standard_normal((600, 384)))  # no position limit
    assert gauss.hidden.shape == (7, 600, 384)


def test_bad_text(enc):
    with pytest.raises(TypeError, match="text must be a str"):
        enc.hidden_states(b"bytes")
    for empty in ("", "   \n"):
        with pytest.raises(ValueError, match="text is empty"):
            enc.hidden_states(empty)
    with pytest.raises(ValueError, match="more than the model's 512 positions"):
        enc.hidden_states("word " * 600)
    with pytest.raises(ValueError, match="states"):
        enc.run(np.zeros((3, 5)))


def test_bad_directories(tmp_path):
    with pytest.raises(TypeError, match="path must be"):
        tt.load_encoder(3)
    with pytest.raises(FileNotFoundError, match="not a directory"):
        tt.load_encoder(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="has no config.json, model.safetensors, tokenizer.json"):
        tt.load_encoder(tmp_path)
    src = tt.bundled_model_dir()
    for name in ("model.safetensors", "tokenizer.json"):
        (tmp_path / name).symlink_to(src / name)
    config = json.loads((src / "config.json").read_text())
    for key, value, message in [
        ("model_type", "gpt2", "model_type must be 'bert'"),
        ("hidden_act", "relu", "hidden_act must be 'gelu'"),
        ("position_embedding_type", "relative_key", "absolute position"),
    ]:
        (tmp_path / "config.json").write_text(json.dumps({**config, key: value}))
        with pytest.raises(ValueError, match=message):
            tt.load_encoder(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="expected 0000"):
        tt.load_encoder(tmp_path, sha256="0" * 64)
    with pytest.raises(ValueError, match="64 characters"):
        tt.load_encoder(tmp_path, sha256="abc")
    assert tt.load_encoder(tmp_path).sha256 == tt.BUNDLED_SHA256  # another directory: recorded


def test_corrupted_weights_refused(tmp_path):
    src = tt.bundled_model_dir()
    for name in ("config.json", "tokenizer.json"):
        shutil.copy(src / name, tmp_path / name)
    data = bytearray((src / "model.safetensors").read_bytes())
    data[-1] ^= 1  # one bit of the last weight
    (tmp_path / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(ValueError, match="corrupted or another model"):
        tt.load_encoder(tmp_path, sha256=tt.BUNDLED_SHA256)


def test_layer_field_with_masses(enc):
    """The cheap field (heads in dimension k) against the MultiHead of Softmax heads in
    homogeneous coordinates, with unequal masses (the masses enter both as log-weights of the
    keys; a field ignoring them differs by order 1)."""
    layer = enc.layers[4]
    rng = np.random.default_rng(2)
    x = enc.forward(UNSEEN[1]).attention[3]
    w = rng.uniform(0.1, 1.0, len(x))
    w /= w.sum()
    cheap = layer.field().velocity(tp.Empirical(x, w))
    full = layer.multihead().velocity(tp.Empirical(tt.lift(x), w))[:, :-1]
    assert np.abs(cheap - full).max() <= 1e-12 * np.abs(full).max()
    assert np.abs(cheap - layer.attention(x)).max() > 1e-3 * np.abs(full).max()
    with pytest.raises(TypeError, match="EncoderLayer"):
        tt.LayerAttention("layer")


def test_symmetric_spectra_low_rank(enc):
    """The 2k eigenvalues from the QR route against the dense d x d eigendecomposition (the
    other d - 2k eigenvalues are zero to round-off)."""
    layer = enc.layers[1]
    spectra = layer.symmetric_spectra()
    assert spectra.shape == (12, 64)
    A, V = layer.score_matrices(), layer.value_matrices()
    for h in (0, 1, 9):
        M = V[h] @ A[h]
        dense = np.linalg.eigvalsh(M + M.T)
        scale = np.abs(dense).max()
        assert np.abs(dense[:32] - spectra[h, :32]).max() < 1e-10 * scale  # the negative ones
        assert np.abs(dense[-32:] - spectra[h, -32:]).max() < 1e-10 * scale
        assert np.abs(dense[32:-32]).max() < 1e-10 * scale


def test_attention_weights(enc):
    layer = enc.layers[0]
    x = enc.forward(UNSEEN[0]).embeddings
    P = layer.attention_weights(x)
    assert P.shape == (12, len(x), len(x)) and np.allclose(P.sum(axis=2), 1.0)
    # the heads' averages, through V_h and the offsets, give the sub-block's update
    V, offsets = layer.value_matrices(), layer.value_offsets
    rebuilt = sum(P[h] @ x @ V[h].T + offsets[h] for h in range(12)) + layer.output_bias
    assert np.allclose(rebuilt, layer.attention(x), rtol=0, atol=1e-12 * np.abs(rebuilt).max())


def test_sliced_gaussian_gap():
    rng = np.random.default_rng(3)
    g = rng.standard_normal((500, 20)) @ rng.standard_normal((20, 20)) + 5.0
    # affine invariance: a Gaussian sample's gap is the sampling floor, whatever its moments
    assert tt.sliced_gaussian_gap(g) < 0.08
    two_clusters = 5.0 * np.sign(rng.standard_normal((500, 1))) + rng.standard_normal((500, 20))
    assert tt.sliced_gaussian_gap(two_clusters) > 0.2
    with pytest.raises(ValueError, match="at least 2"):
        tt.sliced_gaussian_gap(np.ones((1, 3)))
    with pytest.raises(ValueError, match="degenerate"):
        tt.sliced_gaussian_gap(np.ones((5, 3)))
    with pytest.raises(ValueError, match="directions"):
        tt.sliced_gaussian_gap(g, directions=0)


def test_sliced_gap_directions_not_the_callers_stream():
    """Directions drawn from default_rng(seed) would be rows of a sample the caller drew with
    the same seed: those rows would stand out along their own directions."""
    x = np.random.default_rng(0).standard_normal((256, 64))
    assert tt.sliced_gaussian_gap(x, seed=0) < 0.12


def test_covariance_rates(enc):
    layer = enc.layers[5]
    rng = np.random.default_rng(4)
    G = rng.standard_normal((384, 50))
    S = G @ G.T / 50
    A, V = layer.score_matrices(), layer.value_matrices()
    dense = np.array([2 * np.trace(V[h] @ S @ A[h] @ S) for h in range(12)])
    assert np.allclose(layer.covariance_rates(S), dense, rtol=1e-10, atol=0)
