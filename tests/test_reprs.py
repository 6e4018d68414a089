"""Short reprs (issue 15): a program, a mapping, a kernel's mapping and a compiled kernel show
in one short line in a REPL or a failing test, whatever their size; ``str`` has the rest."""

from pathlib import Path

import polymap

ROOT = Path(__file__).resolve().parents[1]


def test_every_object_a_user_holds_has_a_one_line_repr():
    program = polymap.load(ROOT / "models" / "gpt3_attention_tiny.te")
    kernel = polymap.compile(program)
    mapping = kernel.mapping
    shown = {
        "program": repr(program),
        "mapping": repr(mapping),
        "kernel mapping": repr(mapping.kernels[1]),
        "kernel": repr(mapping.kernels[1].kernel),
        "compiled": repr(kernel),
    }
    for what, text in shown.items():
        assert "\n" not in text and len(text) < 160, (what, text)
    assert shown["program"] == (
        "<Program gpt3_attention_tiny: sizes SEQ=32, DIM=128; buffers X, Wq, K, V, Q, S, O; 5 statements>"
    )
    assert shown["mapping"].startswith(
        "<Mapping of gpt3_attention_tiny for NVIDIA H100 SXM5: 5 kernels, solved"
    )
    assert shown["mapping"].endswith(", proved>")
    loops = ", ".join(
        f"{m.index} {m.thread_axis.value}:{m.threads}x{m.seq}" for m in mapping.kernels[1].loops
    )
    assert shown["kernel mapping"].startswith(f"<KernelMapping kernel1: {loops}")
    assert shown["kernel"] == "<Kernel kernel1: band s, d>"
    lines = len(kernel.source.splitlines())
    assert shown["compiled"] == (
        f"<Kernel of gpt3_attention_tiny: 5 kernels, {lines} lines of CUDA C, launcher {kernel.launcher}>"
    )


def test_a_long_list_of_buffers_is_cut_short():
    decls = "\n".join(f"in b{k}: f32[4]" for k in range(20))
    program = polymap.parse(decls + "\nout z: f32[4]\npar 4 i { z[i] = b0[i] }", name="many")
    assert repr(program) == (
        "<Program many: sizes none; buffers b0, b1, b2, b3, b4, b5, b6, b7 and 13 more; 1 statement>"
    )


def test_the_report_ends_with_its_key_and_the_key_points_at_a_section_that_exists():
    report = polymap.optimize(polymap.load(ROOT / "models" / "transpose.te")).report()
    last = report.splitlines()[-1]
    assert last.startswith("key: T threads of a block and S points of a thread on the loop;")
    assert "sectors/req: the 32-byte sectors one warp request touches" in last
    assert "(docs/mapping.md, 'Reading the report')" in last
    docs = (ROOT / "docs" / "mapping.md").read_text()
    assert "\n## Reading the report\n" in docs and "`key: ...`" in docs
    serial = polymap.optimize(polymap.parse("param N = 8\nin x: f32[N]\nout s: f32\nseq N i { s += x[i] }"))
    assert "key:" not in serial.report()  # no loop on the GPU: no T, S or lanes to explain
