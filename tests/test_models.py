"""The workloads under models/.

Every ``models/*.te`` file must parse, pass the polyhedral analysis (race and bounds
proofs) at its default sizes, and compute, at small bound sizes, what an independent NumPy
formulation of the same kernel computes.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from polymap.errors import NotAffineError
from polymap.ir.nodes import IConst, Program
from polymap.ir.parse import load
from polymap.poly.model import analyze
from polymap.reference import reference

ROOT = Path(__file__).resolve().parent.parent
MODELS = sorted((ROOT / "models").glob("*.te"))


def analyze_binding_if_needed(program: Program):
    """Analyze ``program``; if a symbolic size makes it non-affine, bind the defaults.

    Returns the program that was analyzed (bound or not) and the analysis."""
    try:
        return program, analyze(program)
    except NotAffineError as err:
        assert err.params, f"NotAffineError without the sizes to bind: {err}"
        assert set(err.params) <= set(program.param_names), (err.params, program.param_names)
        bound = program.bind_defaults()
        return bound, analyze(bound)


# ----------------------------------------------------------------- every model file


def test_models_exist():
    names = {path.stem for path in MODELS}
    expected = {
        "axpy",
        "matmul_256x256x32",
        "matmul_1024",
        "matmul_strided_a",
        "batched_matmul",
        "gpt3_attention",
        "gpt3_attention_tiny",
        "orojenesis_ffn",
        "fc_bias_relu",
        "transpose",
        "gemv",
        "trmv_lower",
        "jacobi1d",
        "softmax_rows",
        "syrk_lower",
    }
    assert expected <= names


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.stem)
def test_model_header_and_defaults(path):
    text = path.read_text()
    header = text.split("\n\n", 1)[0]
    assert header.startswith("#"), "a model starts with a comment saying what it is"
    assert "Source" in text and "Sizes" in text, "the header names the source and the sizes"
    program = load(path)
    assert program.name == path.stem
    assert program.params, "a model declares its sizes"
    missing = [p.name for p in program.params if p.default is None]
    assert not missing, f"sizes without a default: {missing}"


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.stem)
def test_model_analyzes_at_default_sizes(path):
    program = load(path)
    analyzed, _ = analyze_binding_if_needed(program)
    # The defaults are the real sizes: binding them must leave a fully concrete program.
    assert not analyzed.params or analyzed is program


def test_shorthand_and_explicit_loops_both_appear():
    """The einsum shorthand (a top-level assignment) and explicit loops are both used."""
    shorthand = [
        p.stem for p in MODELS if re.search(r"^[A-Za-z_]\w*\[[^\n]*\]\s*\+?=", p.read_text(), re.MULTILINE)
    ]
    explicit = [p.stem for p in MODELS if re.search(r"^par ", p.read_text(), re.MULTILINE)]
    assert shorthand and explicit


def test_flat_transpose_needs_its_size_bound():
    program = load(ROOT / "models" / "transpose_flat.te")
    with pytest.raises(NotAffineError) as err:
        analyze(program)
    assert "N" in err.value.params
    analyze(program.bind(N=64))


def test_gpt3_tiny_is_the_large_chain_at_tiny_size():
    tiny = load(ROOT / "models" / "gpt3_attention_tiny.te").bind_defaults()
    large = load(ROOT / "models" / "gpt3_attention.te").bind(SEQ=32, DIM=128)
    assert tiny.buffers == large.buffers
    assert tiny.body == large.body
    assert dict(tiny.bindings) == {"SEQ": 32, "DIM": 128}


# ------------------------------------------------------- numbers against NumPy


def _jacobi1d(i, s):
    a, b = i["A"].astype(np.float64), i["B"].astype(np.float64)
    for _ in range(s["T"]):
        b[1:-1] = 0.33333 * (a[:-2] + a[1:-1] + a[2:])
        a[1:-1] = 0.33333 * (b[:-2] + b[1:-1] + b[2:])
    return {"A": a, "B": b}


def _layernorm(i, s):
    x = i["X"].astype(np.float64)
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    return {"Y": (x - mean) / np.sqrt(var + 1e-5) * i["gamma"] + i["beta"]}


def _embedding_layernorm(i, s):
    x = i["wte"][i["ids"].astype(np.int64)] + i["wpe"]
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    return {"Y": (x - mean) / np.sqrt(var + 1e-5) * i["gamma"] + i["beta"]}


def _softmax_rows(i, s):
    x = i["X"].astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return {"Y": e / e.sum(axis=1, keepdims=True)}


def _sparsemax_rows(i, s):
    # the closed form (Martins and Astudillo, 2016), not the bisection the model runs: sort
    # the row descending, k the largest index with 1 + k z_k > sum_{<=k} z, tau from the
    # k largest entries
    x = i["X"].astype(np.float64)
    z = -np.sort(-x, axis=1)
    k = np.arange(1, x.shape[1] + 1)
    cumulative = np.cumsum(z, axis=1)
    support = (1 + k * z > cumulative).sum(axis=1)
    tau = (cumulative[np.arange(x.shape[0]), support - 1] - 1) / support
    return {"Y": np.maximum(x - tau[:, None], 0)}


def _masked_softmax(i, s):
    x = np.where(np.tril(np.ones((s["N"], s["N"]), dtype=bool)), i["X"].astype(np.float64), -np.inf)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return {"Y": e / e.sum(axis=1, keepdims=True)}


def _conv2d_padded(i, s):
    padded = np.pad(i["X"].astype(np.float64), 1)
    h, w = s["H"], s["W"]
    return {"Y": sum(i["K"][a, b] * padded[a : a + h, b : b + w] for a in range(3) for b in range(3))}


def _syrk_lower(i, s):
    a, c = i["A"].astype(np.float64), i["C"].astype(np.float64)
    lower = np.tril(np.ones_like(c, dtype=bool))
    updated = i["beta"] * c + i["alpha"] * (a @ a.T)
    return {"C": np.where(lower, updated, c)}


def _histogram(i, s):
    bins = i["P"].astype(np.int64)
    sums = np.zeros(256)
    np.add.at(sums, bins, i["G"])  # exact: 5000 values below 2^8 each
    return {"H": np.bincount(bins, minlength=256), "Gsum": sums}


def _gpt3(i, s):
    q = i["X"] @ i["Wq"]
    return {"O": (q @ i["K"].T) @ i["V"]}


# model name -> (small sizes to bind, or None for the model's defaults;
#                NumPy formulation: (inputs, sizes) -> {output: array})
NUMERIC = {
    "axpy": ({"N": 1000}, lambda i, s: {"z": i["alpha"] * i["x"] + i["y"]}),
    "matmul_256x256x32": ({"M": 8, "N": 12, "K": 5}, lambda i, s: {"C": i["A"] @ i["B"]}),
    "matmul_1024": ({"M": 7, "N": 9, "K": 6}, lambda i, s: {"C": i["A"] @ i["B"]}),
    # Column major with element stride 32: C(i, j) = sum_k A(i, k) B(k, j), stored as
    # C[j, i], A[k, i, 0], B[j, k]; so C = B . A[:, :, 0] in storage terms.
    "matmul_strided_a": ({"M": 6, "N": 5, "K": 7}, lambda i, s: {"C": i["A"][:, ::32] @ i["B"]}),
    "batched_matmul": (
        {"NB": 3, "M": 4, "K": 5, "N": 6},
        lambda i, s: {"C": np.einsum("bik,bkj->bij", i["A"], i["B"])},
    ),
    "gpt3_attention": ({"SEQ": 8, "DIM": 16}, _gpt3),
    "gpt3_attention_tiny": (None, _gpt3),  # at its own defaults, (32, 128)
    "orojenesis_ffn": ({"M": 6, "D": 5, "F": 7}, lambda i, s: {"Y": (i["X"] @ i["W1"]) @ i["W2"]}),
    "fc_bias_relu": (
        {"M": 5, "K": 6, "N": 7},
        lambda i, s: {"C": np.maximum(i["A"] @ i["B"] + i["bias"][None, :], 0)},
    ),
    "transpose": ({"M": 5, "N": 7}, lambda i, s: {"B": i["A"].T}),
    "transpose_flat": ({"N": 6}, lambda i, s: {"Y": i["X"].reshape(s["N"], s["N"]).T.reshape(-1)}),
    "gemv": ({"M": 5, "N": 7}, lambda i, s: {"y": i["A"] @ i["x"]}),
    "trmv_lower": ({"N": 9}, lambda i, s: {"y": np.tril(i["L"]) @ i["x"]}),
    "jacobi1d": ({"T": 3, "N": 10}, _jacobi1d),
    "softmax_rows": ({"M": 5, "N": 7}, _softmax_rows),
    "softmax_rows_onchip": ({"M": 5, "N": 7}, _softmax_rows),
    "softmax_rows_online": ({"M": 5, "N": 7}, _softmax_rows),
    "sparsemax_rows": ({"M": 6, "N": 40}, _sparsemax_rows),
    "layernorm": ({"M": 5, "N": 7}, _layernorm),
    # V above 255: every id random_inputs draws (0..255) is a row of wte
    "embedding_layernorm": ({"V": 300, "T": 6, "D": 7}, _embedding_layernorm),
    "syrk_lower": ({"N": 6, "M": 4}, _syrk_lower),
    "argmax_rows": ({"M": 5, "N": 7}, lambda i, s: {"best": np.argmax(i["X"], axis=1)}),
    "argmax_rows_spread": ({"M": 5, "N": 7}, lambda i, s: {"best": np.argmax(i["X"], axis=1)}),
    "masked_softmax": ({"N": 7}, _masked_softmax),
    "conv2d_padded": ({"H": 6, "W": 5}, _conv2d_padded),
    "matmul_f16": ({"M": 7, "N": 9, "K": 6}, lambda i, s: {"C": i["A"] @ i["B"]}),
    "matmul_u8_dequant": (
        {"M": 5, "K": 8, "N": 6},
        lambda i, s: {"Y": i["X"] @ ((i["W"] - i["zero"][None, :]) * i["scale"][None, :])},
    ),
    "histogram": ({"N": 5000}, _histogram),
}


def test_every_model_has_a_numeric_check():
    assert {p.stem for p in MODELS} == set(NUMERIC)


def random_inputs(program: Program, seed: int = 0) -> dict[str, np.ndarray]:
    """Standard-normal values for every float in/inout buffer of a fully bound program,
    and integers of the whole range of u8 (the quantized codes)."""
    rng = np.random.default_rng(seed)
    inputs = {}
    for decl in program.inputs:
        assert all(isinstance(e, IConst) for e in decl.shape), decl
        shape = tuple(e.value for e in decl.shape)
        if decl.dtype.is_float:
            inputs[decl.name] = rng.standard_normal(shape).astype(decl.dtype.numpy)
        else:
            inputs[decl.name] = rng.integers(0, 256, size=shape).astype(decl.dtype.numpy)
    return inputs


@pytest.mark.parametrize("name", sorted(NUMERIC))
def test_model_matches_numpy(name):
    sizes, formula = NUMERIC[name]
    program = load(ROOT / "models" / f"{name}.te")
    program = program.bind_defaults() if sizes is None else program.bind(**sizes)
    assert not program.params
    sizes = program.sizes
    analyze(program)
    inputs = random_inputs(program)
    got = reference(program, **{k: v.copy() for k, v in inputs.items()})
    want = formula({k: v.astype(np.float64) for k, v in inputs.items()}, sizes)
    outputs = {d.name for d in program.outputs}
    assert set(want) == outputs
    for out, expected in want.items():
        actual = np.asarray(got[out])
        assert actual.shape == expected.shape, out
        assert actual.dtype == program.buffer(out).dtype.numpy, out
        scale = max(1.0, float(np.abs(expected).max()))
        # an f16 result is the exact one rounded to f16: half a unit, 2**-11 relative
        rtol = 2.0**-10 if actual.dtype == np.float16 else 1e-4
        np.testing.assert_allclose(
            actual, expected, rtol=rtol, atol=rtol * 0.1 * scale, err_msg=f"{name}: {out}"
        )


def test_out_buffers_start_as_zeros_and_inout_keeps_untouched_elements():
    """syrk_lower leaves the upper triangle of C as given; jacobi1d its boundary points."""
    program = load(ROOT / "models" / "syrk_lower.te").bind(N=5, M=3)
    inputs = random_inputs(program, seed=1)
    got = np.asarray(reference(program, **{k: v.copy() for k, v in inputs.items()})["C"])
    upper = np.triu_indices(5, k=1)
    np.testing.assert_array_equal(got[upper], inputs["C"][upper])

    program = load(ROOT / "models" / "jacobi1d.te").bind(T=2, N=8)
    inputs = random_inputs(program, seed=2)
    got = reference(program, **{k: v.copy() for k, v in inputs.items()})
    for buf in ("A", "B"):
        np.testing.assert_array_equal(np.asarray(got[buf])[[0, -1]], inputs[buf][[0, -1]])
