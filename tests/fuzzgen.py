"""Random valid TE programs for the end-to-end fuzzing suite (issue 14, "Keep it that way").

``generate(seed)`` returns a ``FuzzCase``: the program text, how its sizes are given (bound
before compiling, defaults, or symbolic with an isl context) and the concrete sizes it runs
at. The same seed always gives the same case, so a failure is reproduced from its seed alone
(``python tests/fuzzcheck.py --show SEED``).

A program is a sequence of top-level *fragments*. Each fragment declares its own fresh
``in`` buffers, shaped so that every read stays in bounds, and writes only its own fresh
``out``/``inout`` buffers, so fragments never race with each other. Inside a fragment:

* a write's subscripts hold every enclosing par index through a form injective in it
  (``i``, ``B - 1 - i``, ``i + c``, ``c * i + d``), so two par iterations never write one
  element; seq indices left out of the target make a reduction (an accumulating op);
* a read of index ``i`` whose values lie in ``[0, B)`` (``B``: the extent of i, or of the
  loop that bounds a triangular i) uses a form together with the smallest dimension that
  holds it: ``i`` in ``B``, ``i + c`` in ``B + c``, ``c * i + d`` in ``c * B``, ``i + j`` in
  ``B_i + B_j``, ``i / c`` in ``B``, ``(c * i + d) % m`` in ``m``...

The fragments cover what the issue asks for: par bands of 1-4 loops (4 are folded),
triangular extents, seq reductions, matmul-like reductions the optimizer stages in shared
memory (with compound row extents ``K + 1``), convolutions with ``H - K + 1`` outputs, host
loops (a seq loop around par bands), block-local ``new`` buffers, quasi-affine indices with
large multipliers, flat transposes (``p % N``, ``p / N`` with N bound) and mixes of every dtype
(the storage types f16, bf16, i8, u8, bool and i64 too).

Values stay finite: divisions are by ``abs(.) + 1`` and only bounded functions are nested.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

# the storage types and i64 as often as the three others together
DTYPES = ("f32", "f64", "i32") * 2 + ("f16", "bf16", "i8", "u8", "i64", "bool")


@dataclass(frozen=True, slots=True)
class FuzzCase:
    """One generated program. ``mode``: "bind" (compile ``program.bind(**sizes)``),
    "default" (sizes have defaults equal to ``sizes``) or "symbolic" (compiled with
    ``context``, run at ``sizes`` inferred from the input shapes)."""

    seed: int
    text: str
    mode: str
    sizes: tuple[tuple[str, int], ...]
    context: str | None
    features: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"fuzz{self.seed}"


@dataclass(slots=True)
class _Var:
    name: str
    kind: str  # "par" | "seq"
    bound: str  # every value of the index lies in [0, bound)
    full: bool  # the index runs over all of [0, bound) (not triangular)


@dataclass(slots=True)
class _State:
    rng: random.Random
    mode: str
    sizes: dict[str, int]
    decls: list[str] = field(default_factory=list)
    constraints: list[str] = field(default_factory=list)
    features: set[str] = field(default_factory=set)
    count: int = 0

    def fresh(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"


def _p(text: str) -> str:
    """Parenthesized unless it is a name or a number."""
    return text if text.replace("_", "").isalnum() else f"({text})"


class _Gen:
    def __init__(self, seed: int) -> None:
        rng = random.Random(seed)
        mode = rng.choice(["bind", "default", "symbolic", "symbolic"])
        big = rng.random() < 0.15
        sizes = {
            "M": rng.randint(1, 9),
            "N": rng.choice([rng.randint(1, 12), 4096 if big else 16]),
            "K": rng.randint(1, 8),
        }
        self.s = _State(rng, mode, sizes)
        self.used: set[str] = set()
        self.seed = seed
        # the language's later additions (select, conditions, functions, if) draw from their
        # own stream, so that what the main stream generates keeps its shape
        self.extra = random.Random(seed * 7919 + 1)
        # the if on data's draws: a stream of its own, so that the programs of the other
        # seeds' features stay as they were
        self.data = random.Random(seed * 104729 + 3)
        # the long reductions' draws (split into parts by the pipeline): a stream of their own
        self.splits = random.Random(seed * 15485863 + 5)
        # the scatters' draws (atomic updates through an index buffer): a stream of their own
        self.scatters = random.Random(seed * 2147483647 + 7)
        # the bitwise operations' draws: a stream of their own
        self.bits = random.Random(seed * 998244353 + 9)
        # the select scans' draws (an argmax per row): a stream of their own
        self.scans = random.Random(seed * 1000000007 + 11)
        # the iterated reductions' draws (a row reduction inside a seq loop of a par body,
        # spread over the lanes once per step): a stream of their own
        self.steps = random.Random(seed * 1000000009 + 13)

    # -- sizes and extents

    def size(self, name: str) -> str:
        self.used.add(name)
        return name

    def extent(self, small: bool = True) -> tuple[str, int]:
        """A loop extent: text and its value at the concrete sizes."""
        r, sz = self.s.rng, self.s.sizes
        kind = r.choice(["const", "size", "size", "compound"])
        if kind == "const":
            c = r.randint(1, 6)
            return str(c), c
        name = r.choice(["M", "K"] if small else ["M", "N", "K"])
        if kind == "size":
            return self.size(name), sz[name]
        c = r.randint(1, 3)
        if r.random() < 0.5:
            return f"{self.size(name)} + {c}", sz[name] + c
        self.s.features.add("compound-extent")
        return f"2 * {self.size(name)} + {c}", 2 * sz[name] + c

    # -- index forms

    def write_form(self, v: _Var) -> tuple[str, str]:
        """(index, dimension): injective in v."""
        r = self.s.rng
        b = v.bound
        choice = r.choice(["id", "id", "rev", "shift", "scale"])
        if choice == "id":
            return v.name, b
        if choice == "rev":
            return f"{_p(b)} - 1 - {v.name}", b
        if choice == "shift":
            c = r.randint(1, 3)
            return f"{v.name} + {c}", f"{b} + {c}"
        c, d = r.randint(2, 3), r.randint(0, 1)
        return (f"{c} * {v.name} + {d}" if d else f"{c} * {v.name}"), f"{c} * {_p(b)}"

    def read_form(self, loops: list[_Var]) -> tuple[str, str]:
        """(index, dimension) for a read inside ``loops`` (possibly constant)."""
        r = self.s.rng
        if not loops or r.random() < 0.05:
            c = r.randint(0, 2)
            return str(c), str(c + 1 + r.randint(0, 2))
        v = r.choice(loops)
        choice = r.choice(
            ["id", "id", "rev", "shift", "scale", "sum", "div", "mod", "mod", "bigmul", "divmul"]
        )
        if choice in ("id",):
            return v.name, v.bound
        if choice == "rev":
            return f"{_p(v.bound)} - 1 - {v.name}", v.bound
        if choice == "shift":
            c = r.randint(1, 3)
            return f"{v.name} + {c}", f"{v.bound} + {c}"
        if choice == "scale":
            c = r.randint(2, 4)
            return f"{c} * {v.name}", f"{c} * {_p(v.bound)}"
        if choice == "sum" and len(loops) > 1:
            w = r.choice([x for x in loops if x is not v])
            self.s.features.add("compound-shape")
            return f"{v.name} + {w.name}", f"{v.bound} + {w.bound}"
        self.s.features.add("quasi-affine")
        if choice == "div":
            c = r.randint(2, 4)
            return r.choice([f"{v.name} / {c}", f"{v.name} // {c}"]), v.bound
        if choice == "bigmul":
            c, m = r.choice([1000, 65536, 1000000, 1048576]), r.randint(2, 9)
            self.s.features.add("large-coefficient")
            return f"({v.name} * {c}) % {m}", str(m)
        if choice == "divmul":
            c = r.choice([3, 1000, 1048576])
            self.s.features.add("large-coefficient" if c > 3 else "quasi-affine")
            return f"({v.name} * {c}) / {c}", v.bound
        c, d, m = r.randint(1, 5), r.randint(0, 4), r.randint(2, 7)
        if len(loops) > 1 and r.random() < 0.4:
            w = r.choice([x for x in loops if x is not v])
            return f"({c} * {v.name} + {w.name} + {d}) % {m}", str(m)
        return f"({c} * {v.name} + {d}) % {m}", str(m)

    # -- values

    def new_input(self, dims: list[str], dtype: str | None = None) -> tuple[str, str]:
        name = self.s.fresh("X")
        dtype = dtype or self.s.rng.choice(DTYPES)
        self.s.decls.append(f"in {name}: {dtype}[{', '.join(dims)}]" if dims else f"in {name}: {dtype}")
        return name, dtype

    def read(self, loops: list[_Var], ndim: int | None = None) -> str:
        r = self.s.rng
        ndim = r.randint(0 if r.random() < 0.1 else 1, 3) if ndim is None else ndim
        forms = [self.read_form(loops) for _ in range(ndim)]
        name, _ = self.new_input([d for _, d in forms])
        indices = [i for i, _ in forms]
        if forms and self.extra.random() < 0.15:  # a gather: one index read from an index buffer
            x = self.extra
            position = x.randrange(len(forms))
            index, dim = forms[position]
            source = self.s.fresh("G")
            self.s.decls.append(f"in {source}: {x.choice(['i32', 'i64', 'u8'])}[{dim}]")
            indices[position] = f"{source}[{index}]"
            self.s.features.add("gather")
        return f"{name}[{', '.join(indices)}]" if forms else name

    def value(self, loops: list[_Var], depth: int = 2) -> str:
        r = self.s.rng
        kind = r.choice(["read", "read", "const", "index"] + ["bin", "bin", "call"] * (depth > 0))
        if kind == "const":
            return r.choice(["0", "1", "2", "3", "0.5", "1.5"])
        if kind == "index" and loops:
            return r.choice(loops).name
        if kind in ("read", "index"):
            return self.read(loops)

        def sub():
            return self.value(loops, depth - 1)

        if self.bits.random() < 0.1:
            return self.bitwise(loops)
        x = self.extra
        if x.random() < 0.12:  # a select whose condition compares plain operands (no libm
            # calls: both sides must round alike for the comparison to agree)
            self.s.features.add("select")
            plain = [self.read(loops, 0) if x.random() < 0.5 else self.read(loops)]
            plain.append(x.choice(["0", "1", "-0.5"]) if x.random() < 0.5 else self.read(loops))
            cond = f"{plain[0]} {x.choice(['<', '<=', '>', '>=', '==', '!='])} {plain[1]}"
            if loops and x.random() < 0.3:
                cond = f"{cond} {x.choice(['and', 'or'])} {x.choice(loops).name} % 2 == 0"
            if x.random() < 0.2:
                cond = f"not ({cond})"
            return f"select({cond}, {sub()}, {sub()})"
        if x.random() < 0.1:
            self.s.features.add("functions")
            fn = x.choice(["sin", "cos", "sigmoid", "erf", "pow"])
            if fn == "pow":
                return f"pow(abs({sub()}) + 0.5, 1.5)"
            return f"{fn}({sub()})"
        if kind == "bin":
            op = r.choice(["+", "-", "*", "/"])
            if op == "/":
                return f"({sub()}) / (abs({sub()}) + 1)"
            return f"({sub()}) {op} ({sub()})"
        fn = r.choice(["tanh", "abs", "max", "min", "sqrt", "exp", "neg"])
        if fn in ("max", "min"):
            return f"{fn}({sub()}, {sub()})"
        if fn == "sqrt":
            return f"sqrt(abs({sub()}))"
        if fn == "exp":
            return f"exp(tanh({sub()}))"
        if fn == "neg":
            return f"-({sub()})"
        return f"{fn}({sub()})"

    def bitwise(self, loops: list[_Var]) -> str:
        """A bitwise operation of integers converted from plain reads, loop indices and
        small literals: no libm value, whose last ulp could flip a bit of the result."""
        b = self.bits
        self.s.features.add("bitwise")

        def operand() -> str:
            pick = b.random()
            if pick < 0.5:
                return f"{b.choice(['i32', 'i64'])}({self.read(loops)})"
            if pick < 0.7 and loops:
                return b.choice(loops).name
            return b.choice(["1", "3", "7", "-1", "255"])

        op = b.choice(["&", "|", "^", "<<", ">>", "~", "cmp"])
        if op == "cmp":  # a comparison as a value: 1 or 0
            self.s.features.add("truth-value")
            return f"({operand()} {b.choice(['<', '>=', '==', '!='])} {operand()})"
        if op == "~":
            return f"(~{operand()})"
        if op in ("<<", ">>") and b.random() < 0.5:  # counts past the width and negative ones
            return f"({operand()} {op} {b.choice(['0', '1', '5', '31', '32', '40', '63', '64'])})"
        return f"({operand()} {op} {operand()})"

    def out(self, forms: list[tuple[str, str]], dtype: str | None = None, kind: str = "out") -> str:
        name = self.s.fresh("W")
        dtype = dtype or self.s.rng.choice(DTYPES)
        dims = [d for _, d in forms]
        self.s.decls.append(
            f"{kind} {name}: {dtype}[{', '.join(dims)}]" if dims else f"{kind} {name}: {dtype}"
        )
        return f"{name}[{', '.join(i for i, _ in forms)}]" if forms else name

    def target(self, loops: list[_Var]) -> tuple[str, bool]:
        """A fresh output indexed by every par index (and some seq ones); True when some
        seq index is left out (the statement then reduces)."""
        r = self.s.rng
        chosen = [v for v in loops if v.kind == "par" or r.random() < 0.5]
        reduces = any(v.kind == "seq" and v not in chosen for v in loops)
        r.shuffle(chosen)
        return self.out([self.write_form(v) for v in chosen]), reduces

    def scatter(self, loops: list[_Var]) -> str:
        """An atomic update through an index buffer (``W[G[i]] += v``): an integer target,
        so that any order of the updates gives the reference's result; the index buffer
        read at some of the loops, its values drawn inside the bins by ``fuzzcheck``."""
        x = self.scatters
        if x.random() < 0.3:  # an update written atomic: a known element shared by threads
            self.s.features.add("atomic")
            v = x.choice(loops)
            bins = x.randint(1, 5)
            name = self.s.fresh("W")
            self.s.decls.append(f"out {name}: {x.choice(['i32', 'i64'])}[{bins}]")
            op = x.choice(["+=", "-=", "max=", "min="])
            return f"atomic {name}[{v.name} % {bins}] {op} {self.value(loops)}"
        self.s.features.add("scatter")
        on = x.sample(loops, x.randint(1, len(loops)))
        source = self.s.fresh("G")
        self.s.decls.append(
            f"in {source}: {x.choice(['i32', 'i64', 'u8'])}[{', '.join(v.bound for v in on)}]"
        )
        bins = str(x.randint(1, 9))
        dims = [bins] + ([loops[-1].bound] if x.random() < 0.3 else [])
        indices = [f"{source}[{', '.join(v.name for v in on)}]"] + ([loops[-1].name] if len(dims) > 1 else [])
        if x.random() < 0.5:
            dims, indices = dims[::-1], indices[::-1]
        name = self.s.fresh("W")
        self.s.decls.append(f"out {name}: {x.choice(['i32', 'i64'])}[{', '.join(dims)}]")
        return f"{name}[{', '.join(indices)}] {x.choice(['+=', '-=', 'max=', 'min='])} {self.value(loops)}"

    def statement(self, loops: list[_Var]) -> str:
        r = self.s.rng
        if loops and self.scatters.random() < 0.12:
            return self.scatter(loops)
        target, reduces = self.target(loops)
        ops = ["+=", "max=", "min="] if reduces else ["=", "=", "+=", "-=", "*=", "max=", "min="]
        text = f"{target} {r.choice(ops)} {self.value(loops)}"
        x = self.extra
        if loops and x.random() < 0.15:  # under an if on the indices: fewer instances run
            self.s.features.add("if")
            i = x.choice(loops)
            guard = x.choice(
                [
                    f"{i.name} % 2 == 0",
                    f"{i.name} >= 1",
                    f"not {i.name} == 1",
                    f"{i.name} < 2 or {i.name} > 3",
                ]
            )
            if len(loops) > 1 and x.random() < 0.4:
                j = x.choice(loops)
                guard = f"{guard} and {i.name} {x.choice(['<=', '>=', '!='])} {j.name}"
            else_ = f" else {{ {text} }}" if x.random() < 0.2 and not reduces else ""
            text = f"if {guard} {{ {text} }}{else_}"
        d = self.data
        if loops and d.random() < 0.15:  # under an if on data: a predicated statement
            self.s.features.add("data-if")
            on = d.sample(loops, min(len(loops), d.randint(1, 2)))
            name = self.s.fresh("Q")
            dtype = d.choice(["f32", "i32", "u8"])
            cond = f"{name}[{', '.join(v.name for v in on)}] {d.choice(['<', '>=', '!='])} {d.choice(['0', '1', '0.5'])}"
            if self.bits.random() < 0.25:  # a bool mask read as the condition (bits' stream)
                self.s.features.add("bool-condition")
                dtype, cond = (
                    "bool",
                    f"{'not ' if self.bits.random() < 0.3 else ''}{name}[{', '.join(v.name for v in on)}]",
                )
            self.s.decls.append(f"in {name}: {dtype}[{', '.join(v.bound for v in on)}]")
            if d.random() < 0.3:  # an affine conjunct: a guard, the data read only inside it
                cond = f"{d.choice(loops).name} >= 1 and {cond}"
            else_ = f" else {{ {text} }}" if d.random() < 0.2 and not reduces else ""
            text = f"if {cond} {{ {text} }}{else_}"
        return text

    # -- fragments

    def band(self) -> list[str]:
        """Par loops (1-4 deep, maybe triangular), maybe a seq reduction and a local buffer."""
        r = self.s.rng
        big_n = self.s.sizes["N"] > 100  # large sizes in 1-d bands only: the oracle is scalar Python
        depth = r.choices([1, 2, 3, 4], weights=[8, 2, 1, 1] if big_n else [3, 4, 2, 2])[0]
        if depth == 4:
            self.s.features.add("folded-band")
        loops: list[_Var] = []
        heads: list[str] = []
        big = big_n and depth == 1
        for m in range(depth):
            name = self.s.fresh("i")
            if loops and r.random() < 0.35:
                self.s.features.add("triangular")
                outer = r.choice(loops)
                text = r.choice([f"{outer.name} + 1", outer.name, f"{_p(outer.bound)} - {outer.name}"])
                if r.random() < 0.25:  # a band clipped at a width: still below the outer bound
                    self.s.features.add("min-extent")
                    text = f"min({text}, {r.randint(1, 4)})"
                loops.append(_Var(name, "par", outer.bound, False))
            else:
                if big:
                    text, _ = self.size("N"), None
                    self.s.features.add("large-size")
                else:
                    text, _ = self.extent()
                loops.append(_Var(name, "par", text, True))
            heads.append(f"par {text} {name} {{")
        body: list[str] = []
        if r.random() < 0.4:  # a seq reduction innermost
            k = self.s.fresh("k")
            ext, _ = self.extent()
            inner = loops + [_Var(k, "seq", ext, True)]
            self.s.features.add("reduction")
            if r.random() < 0.3:  # a block-local buffer filled then reduced
                self.s.features.add("local-buffer")
                t, c = self.s.fresh("t"), r.randint(1, 5)
                tv = _Var(self.s.fresh("k"), "seq", str(c), True)
                dtype = r.choice(DTYPES)
                body += [
                    f"new {t}: {dtype}[{c}]",
                    f"seq {c} {tv.name} {{ {t}[{tv.name}] = {self.value(loops + [tv], 1)} }}",
                ]
                target, _ = self.target(loops)
                body.append(
                    f"seq {c} {tv.name}b {{ {target} += {t}[{c} - 1 - {tv.name}b] * "
                    f"({self.value(loops, 1)}) }}"
                )
            body += [f"seq {ext} {k} {{", "  " + self.statement(inner), "}"]
        else:
            body += [self.statement(loops) for _ in range(r.randint(1, 2))]
        return heads + ["  " + line for line in body] + ["}"] * depth

    def matmul(self) -> list[str]:
        """C[i, j] += A[i, k + a] * B[k + b, j]: a reduction the optimizer stages."""
        r = self.s.rng
        self.s.features |= {"staged-shape", "reduction"}
        m, n, k = self.size("M"), self.size("N"), self.size("K")
        if self.s.sizes["N"] > 40:
            n = self.size("M")
        a, b = r.choice([0, 0, 1, 2]), r.choice([0, 0, 1])
        ta, tb = r.choice(["f32", "f32", "f64", "i32"]), r.choice(["f32", "f64", "i32"])
        dims_a = [m, f"{k} + {a}" if a else k]
        dims_b = [f"{k} + {b}" if b else k, n]
        if r.random() < 0.3:  # A stored transposed (column major)
            dims_a = dims_a[::-1]
        A, _ = self.new_input(dims_a, ta)
        B, _ = self.new_input(dims_b, tb)
        C = self.s.fresh("C")
        self.s.decls.append(f"out {C}: {r.choice(['f32', 'f64'])}[{m}, {n}]")
        i, j, kk = self.s.fresh("i"), self.s.fresh("j"), self.s.fresh("k")
        ka = f"{kk} + {a}" if a else kk
        kb = f"{kk} + {b}" if b else kk
        ra = f"{A}[{ka}, {i}]" if dims_a[0] != m else f"{A}[{i}, {ka}]"
        return [
            f"par {m} {i} {{",
            f"  par {n} {j} {{",
            f"    seq {k} {kk} {{",
            f"      {C}[{i}, {j}] += {ra} * {B}[{kb}, {j}]",
            "    }",
            "  }",
            "}",
        ]

    def conv(self) -> list[str]:
        """A valid convolution, its H - K + 1 output then reduced (maybe staged)."""
        r = self.s.rng
        self.s.features |= {"conv", "reduction"}
        sz = self.s.sizes
        h, k = ("M", "K") if sz["M"] >= sz["K"] else ("K", "M")
        self.size(h), self.size(k)
        self.s.constraints.append(f"{h} >= {k}")
        X, _ = self.new_input([h, "N" if sz["N"] <= 40 else k], r.choice(["f32", "f64"]))
        cols = "N" if sz["N"] <= 40 else k
        self.size(cols)
        Wt, _ = self.new_input([k], r.choice(["f32", "i32"]))
        Y = self.s.fresh("Y")
        self.s.decls.append(f"new {Y}: f32[{h} - {k} + 1, {cols}]")
        i, j, kk = self.s.fresh("i"), self.s.fresh("j"), self.s.fresh("k")
        lines = [
            f"par {h} - {k} + 1 {i} {{ par {cols} {j} {{",
            f"  {Y}[{i}, {j}] = 0",
            f"  seq {k} {kk} {{ {Y}[{i}, {j}] += {X}[{i} + {kk}, {j}] * {Wt}[{kk}] }}",
            "} }",
        ]
        if r.random() < 0.7:  # reduce the conv output against a matrix: staged over its rows
            self.s.features.add("staged-conv")
            B, _ = self.new_input([f"{h} - {k} + 1", cols], "f32")
            Z = self.s.fresh("Z")
            self.s.decls.append(f"out {Z}: f32[{cols}, {cols}]")
            a, b, c = self.s.fresh("a"), self.s.fresh("b"), self.s.fresh("c")
            lines += [
                f"par {cols} {a} {{ par {cols} {b} {{ seq {h} - {k} + 1 {c} {{",
                f"  {Z}[{a}, {b}] += {Y}[{c}, {a}] * {B}[{c}, {b}]",
                "} } }",
            ]
        else:
            copy = self.s.fresh("O")
            self.s.decls.append(f"out {copy}: f32[{h} - {k} + 1, {cols}]")
            lines.append(
                f"par {h} - {k} + 1 {i}c {{ par {cols} {j}c {{ {copy}[{i}c, {j}c] = {Y}[{i}c, {j}c] }} }}"
            )
        return lines

    def host_loop(self) -> list[str]:
        """A seq loop around par bands: kernels launched in a loop (a Jacobi sweep)."""
        r = self.s.rng
        self.s.features.add("host-loop")
        t = self.s.fresh("t")
        steps = r.randint(1, 4)
        n, _ = self.extent()
        A, B = self.s.fresh("A"), self.s.fresh("B")
        dtype = r.choice(["f32", "f64", "i32"])
        self.s.decls += [f"inout {A}: {dtype}[{n} + 2]", f"out {B}: {dtype}[{n} + 2]"]
        i, j = self.s.fresh("i"), self.s.fresh("i")
        c = "0.25" if dtype != "i32" else "1"
        lines = [
            f"seq {steps} {t} {{",
            f"  par {n} {i} {{ {B}[{i} + 1] = {c} * ({A}[{i}] + {A}[{i} + 1] + {A}[{i} + 2]) }}",
            f"  par {n} {j} {{ {A}[{j} + 1] = {B}[{j} + 1] - {A}[{j} + 1] + {t} }}",
        ]
        if r.random() < 0.4:
            m, _ = self.extent()
            u, v = self.s.fresh("i"), self.s.fresh("j")
            D = self.s.fresh("D")
            self.s.decls.append(f"inout {D}: {dtype}[{m}, {n}]")
            lines.append(f"  par {m} {u} {{ par {n} {v} {{ {D}[{u}, {v}] += {A}[{v} + 1] }} }}")
        return lines + ["}"]

    def scalar_reduction(self) -> list[str]:
        """A seq-only nest into a 0-d output, or an einsum row reduction."""
        r = self.s.rng
        self.s.features.add("seq-reduction")
        if r.random() < 0.5:
            n, _ = self.extent()
            i = self.s.fresh("i")
            X, _ = self.new_input([n], r.choice(DTYPES))
            s = self.out([], r.choice(DTYPES))
            op = r.choice(["+=", "max=", "min="])
            return [f"seq {n} {i} {{ {s} {op} {X}[{i}] }}"]
        m, _ = self.extent()
        n, _ = self.extent()
        X, _ = self.new_input([m, n], r.choice(DTYPES))
        Rr = self.s.fresh("R")
        self.s.decls.append(f"out {Rr}: {r.choice(DTYPES)}[{m}]")
        a, b = self.s.fresh("e"), self.s.fresh("e")
        return [f"{Rr}[{a}] {r.choice(['+=', 'max=', 'min='])} {X}[{a}, {b}]"]

    def long_reduction(self) -> list[str]:
        """A reduction long enough to be split into parts (``transform.split``): a full sum,
        a few rows, or a skinny product, over 512 to 6000 elements (a constant extent)."""
        d = self.splits
        self.s.features.add("long-reduction")
        length = d.randint(512, 6000)
        dtype = d.choice(["f32", "f32", "f64", "i32", "i64"])
        op = d.choice(["+=", "+=", "max=", "min="])
        kind = d.choice(["out", "inout"])
        X, W, a, b, c = (self.s.fresh(n) for n in ("X", "W", "e", "e", "e"))
        shape = d.choice(["full", "rows", "product"])
        if shape == "full":
            self.s.decls += [f"in {X}: {dtype}[{length}]", f"{kind} {W}: {dtype}[1]"]
            return [f"seq {length} {b} {{ {W}[0] {op} {X}[{b}] }}"]
        rows = d.randint(1, 6)
        if shape == "rows":
            self.s.decls += [f"in {X}: {dtype}[{rows}, {length}]", f"{kind} {W}: {dtype}[{rows}]"]
            return [f"par {rows} {a} {{ seq {length} {b} {{ {W}[{a}] {op} {X}[{a}, {b}] }} }}"]
        cols = d.randint(1, 5)
        Y = self.s.fresh("X")
        self.s.decls += [
            f"in {X}: {dtype}[{rows}, {length}]",
            f"in {Y}: {dtype}[{length}, {cols}]",
            f"{kind} {W}: {dtype}[{rows}, {cols}]",
        ]
        return [
            f"par {rows} {a} {{ par {cols} {c} {{ seq {length} {b} {{ {W}[{a}, {c}] += {X}[{a}, {b}] * {Y}[{b}, {c}] }} }} }}"
        ]

    def select_scan(self) -> list[str]:
        """An argmax or argmin per row, or of a whole array at the top level: a position moved
        by a select beside its running extreme (``transform.scans``: the pipeline may run it
        as exact passes, split into parts at the top level). Values with ties (floored
        floats, small integers), every comparison form, and the extreme a temporary
        (block-local, or a program-wide ``new`` at the top level) or an output the caller sees."""
        x = self.scans
        self.s.features.add("select-scan")
        rows, length = x.randint(1, 6), x.choice([x.randint(1, 9), 40, 300])
        dtype = x.choice(["f32", "f32", "f64", "f16", "i32", "i64"])
        mtype = "f32" if dtype == "f16" else dtype  # a read of f16 computes in f32
        X, P, M = self.s.fresh("X"), self.s.fresh("W"), self.s.fresh("m")
        a, b = self.s.fresh("i"), self.s.fresh("k")
        ptype = x.choice(["i32", "i64"])
        value = x.choice([f"{X}[{a}, {b}]", f"{X}[{a}, {length} - 1 - {b}]"])
        if mtype.startswith("f") and x.random() < 0.6:
            value = f"floor({value} * 2)"  # ties among float values
        op = x.choice(["max=", "min="])
        cmp = x.choice([">", ">="] if op == "max=" else ["<", "<="])
        cond = f"{value} {cmp} {{m}}"
        if x.random() < 0.3:  # the mirror: M < E for E > M
            mirror = {">": "<", ">=": "<=", "<": ">", "<=": ">="}[cmp]
            cond = f"{{m}} {mirror} {value}"
        starts = ["0", f"{X}[{a}, 0]"] + (["-inf", "inf"] if mtype.startswith("f") else [])
        start = x.choice(starts)
        seen = x.random() < 0.3  # an extreme the caller sees: its pass stays
        # drawn last, so that the draws above stay those of the seeds recorded before
        top = x.random() < 0.25
        if top:  # one row, no par loop: X[i, k] reads X[k]
            cond, value, start = (t.replace(f"{X}[{a}, ", f"{X}[") for t in (cond, value, start))
            if x.random() < 0.5:  # long enough that the passes, split, beat one thread
                longer = 5000
                cond, value = (t.replace(f"[{length} - 1 - ", f"[{longer} - 1 - ") for t in (cond, value))
                length = longer
            self.s.decls += [f"in {X}: {dtype}[{length}]", f"out {P}: {ptype}"]
            self.s.decls.append(f"{'out' if seen else 'new'} {M}: {mtype}")
            return [
                f"{M} = {start}",
                f"{P} = {x.randint(0, 2)}",
                f"seq {length} {b} {{",
                f"  {P} = select({cond.format(m=M)}, {b}, {P})",
                f"  {M} {op} {value}",
                "}",
            ]
        self.s.decls += [f"in {X}: {dtype}[{rows}, {length}]", f"out {P}: {ptype}[{rows}]"]
        if seen:
            m = f"{M}[{a}]"
            self.s.decls.append(f"out {M}: {mtype}[{rows}]")
            local = []
        else:
            m, local = M, [f"  new {M}: {mtype}"]
        return [
            f"par {rows} {a} {{",
            *local,
            f"  {m} = {start}",
            f"  {P}[{a}] = {x.randint(0, 2)}",
            f"  seq {length} {b} {{",
            f"    {P}[{a}] = select({cond.format(m=m)}, {b}, {P}[{a}])",
            f"    {m} {op} {value}",
            "  }",
            "}",
        ]

    def flat_transpose(self) -> list[str]:
        """``p % N`` and ``p / N`` with N a number: needs binding (or a default)."""
        self.s.features.add("flat-transpose")
        sz = self.s.sizes
        n = "K" if sz["N"] > 40 else self.s.rng.choice(["K", "M", "N"])
        if self.s.mode != "bind":  # a product of sizes is affine once bound: else write a number
            nn = str(sz[n])
        else:
            nn = self.size(n)
        X, _ = self.new_input([f"{nn} * {nn}"], self.s.rng.choice(DTYPES))
        Y = self.s.fresh("Y")
        self.s.decls.append(f"out {Y}: {self.s.rng.choice(DTYPES)}[{nn} * {nn}]")
        p = self.s.fresh("p")
        return [f"par {nn} * {nn} {p} {{ {Y}[({p} % {nn}) * {nn} + {p} / {nn}] = {X}[{p}] }}"]

    def iterated_reduction(self) -> list[str]:
        """Per row, a seq loop of a few steps around a row reduction (``mapping/lanes.py``
        spreads the reduction once per step): its accumulator reset at each step or carried
        across them, a value of the step read by lane 0 and broadcast to the lanes, and the
        total stored after each step; or a running value stored inside the reduction (which
        keeps it in one lane)."""
        x = self.steps
        self.s.features.add("iterated-reduction")
        rows, steps = x.randint(1, 6), x.randint(1, 4)
        length = x.choice([x.randint(1, 9), 40, 300])
        dtype = x.choice(["f32", "f64", "i32", "i64"])
        op = x.choice(["+=", "+=", "max=", "min="])
        X, W, Y, acc, c = (self.s.fresh(n) for n in ("X", "X", "Y", "acc", "c"))
        a, t, b = self.s.fresh("i"), self.s.fresh("t"), self.s.fresh("k")
        self.s.decls += [
            f"in {X}: {dtype}[{rows}, {length}]",
            f"in {W}: {dtype}[{steps}, {length}]",
            f"out {Y}: {dtype}[{rows}, {steps}]",
        ]
        value = x.choice([f"{X}[{a}, {b}]", f"{X}[{a}, {b}] + {W}[{t}, {b}]", f"{X}[{a}, {b}] - {c}"])
        start = x.choice(["0", f"{X}[{a}, 0]"])
        reset = [f"    {acc} = {start}"] if x.random() < 0.5 else []
        running = []
        if x.random() < 0.2:  # a running value, stored at every element: not spread
            R = self.s.fresh("Y")
            self.s.decls.append(f"out {R}: {dtype}[{rows}, {steps}, {length}]")
            running = [f"      {R}[{a}, {t}, {b}] = {acc}"]
        return [
            f"par {rows} {a} {{",
            f"  new {acc}: {dtype}",
            f"  new {c}: {dtype}",
            f"  {acc} = {start}",
            f"  seq {steps} {t} {{",
            f"    {c} = {W}[{t}, 0]",
            *reset,
            f"    seq {length} {b} {{",
            f"      {acc} {op} {value}",
            *running,
            "    }",
            f"    {Y}[{a}, {t}] = {acc}",
            "  }",
            "}",
        ]

    def program(self) -> FuzzCase:
        r = self.s.rng
        fragments = [
            self.band,
            self.band,
            self.band,
            self.matmul,
            self.conv,
            self.host_loop,
            self.scalar_reduction,
            self.flat_transpose,
        ]
        lines: list[str] = []
        for _ in range(r.choices([1, 2, 3], weights=[5, 3, 1])[0]):
            lines += r.choice(fragments)()
        if self.splits.random() < 0.25:
            lines += self.long_reduction()
        if self.scans.random() < 0.15:
            lines += self.select_scan()
        if self.steps.random() < 0.15:
            lines += self.iterated_reduction()
        sizes = {k: v for k, v in self.s.sizes.items() if k in self.used}
        mode = self.s.mode
        if mode == "symbolic":  # every size must be inferable from a dimension of an input
            for name in sorted(sizes):
                if not any(_bare_dim(d, name) for d in self.s.decls if d.startswith("in ")):
                    self.s.decls.append(f"in size_{name}: i32[{name}]")
        header = []
        if sizes:
            if mode == "default":
                header.append("param " + ", ".join(f"{k} = {v}" for k, v in sorted(sizes.items())))
            else:
                header.append("param " + ", ".join(sorted(sizes)))
        context = None
        if mode == "symbolic" and sizes:
            extra = [f"{k} >= 1" for k in sorted(sizes) if r.random() < 0.3]
            context = " and ".join(self.s.constraints + extra) or None
        text = "\n".join(header + self.s.decls + lines) + "\n"
        return FuzzCase(
            self.seed, text, mode, tuple(sorted(sizes.items())), context, tuple(sorted(self.s.features))
        )


def _bare_dim(decl: str, name: str) -> bool:
    inside = decl[decl.find("[") + 1 : decl.rfind("]")] if "[" in decl else ""
    return any(d.strip() == name for d in inside.split(","))


def generate(seed: int) -> FuzzCase:
    """The program of ``seed`` (deterministic)."""
    return _Gen(seed).program()


# ------------------------------------------------------------------ mutations for the parser

TOKENS = (
    "par",
    "seq",
    "new",
    "in",
    "out",
    "inout",
    "param",
    "anchor",
    "{",
    "}",
    "[",
    "]",
    "(",
    ")",
    ",",
    ";",
    "=",
    "+=",
    "max=",
    "//",
    "/",
    "%",
    "*",
    "-",
    "+",
    "0",
    "-1",
    "2147483648",
    "1e309",
    ".5",
    "i",
    "N",
    "f32",
    "i32",
    "f64",
    ":",
    "\n",
    "#",
    "exp(",
    "i * j",
    "N * N",
    "\\",
    '"',
    "é",
    "\t",
    "\0",
)


def mutate(text: str, seed: int) -> str:
    """``text`` with 1-4 random edits: a character or token deleted, inserted, replaced or
    duplicated, a line dropped, doubled or swapped with another (deterministic in ``seed``)."""
    r = random.Random(seed)
    for _ in range(r.randint(1, 4)):
        lines = text.split("\n")
        edit = r.choice(["delete", "insert", "replace", "dup", "line-drop", "line-dup", "line-swap"])
        pos = r.randrange(len(text) + 1)
        if edit == "delete" and text:
            n = r.choice([1, 1, 2, 5])
            text = text[:pos] + text[pos + n :]
        elif edit == "insert":
            text = text[:pos] + r.choice(TOKENS) + text[pos:]
        elif edit == "replace" and text:
            text = text[:pos] + r.choice(TOKENS) + text[pos + 1 :]
        elif edit == "dup" and text:
            end = min(len(text), pos + r.randint(1, 20))
            text = text[:end] + text[pos:end] + text[end:]
        elif edit == "line-drop" and len(lines) > 1:
            del lines[r.randrange(len(lines))]
            text = "\n".join(lines)
        elif edit == "line-dup":
            k = r.randrange(len(lines))
            lines.insert(k, lines[k])
            text = "\n".join(lines)
        elif edit == "line-swap" and len(lines) > 1:
            a, b = r.randrange(len(lines)), r.randrange(len(lines))
            lines[a], lines[b] = lines[b], lines[a]
            text = "\n".join(lines)
    return text
