"""Random tiny einsum chains (contractions, element-wise statements, in-place epilogues,
transposed and second reads of intermediates, f32 and f64) for checking the planner against
tests/plan_oracle.py. Written with a helper that checked 878 (program, capacity) cases."""

from __future__ import annotations

import math
import random

SIZES = [1, 2, 3, 4, 6]
IDX = "ijklmnpq"


class Gen:
    def __init__(self, rng: random.Random, inout: bool = False):
        self.rng = rng
        self.decls: dict[str, tuple[str, str, list[int]]] = {}  # name -> (kind, dtype, shape)
        self.order: list[str] = []
        self.stmts: list[str] = []
        self.n_in = 0
        self.n_tmp = 0
        self.inout = inout

    def dtype(self):
        return self.rng.choice(["f32", "f32", "f64"])

    def new_input(self, shape):
        name = "ABDEFGHJKLMNPQRSUVWXYZ"[self.n_in % 22] + ("" if self.n_in < 22 else str(self.n_in))
        self.n_in += 1
        self.decls[name] = ("in", self.dtype(), list(shape))
        self.order.append(name)
        return name

    def new_tmp(self, shape):
        name = f"T{self.n_tmp}"
        self.n_tmp += 1
        self.decls[name] = ("new", self.dtype(), list(shape))
        self.order.append(name)
        return name

    def access(self, name, idx):
        return f"{name}[{', '.join(idx)}]" if idx else name

    def einsum(self, prev: list[str]) -> str:
        """Add one einsum; ``prev`` the intermediates written so far (last = most recent).
        Returns the output buffer name."""
        rng = self.rng
        # the intermediate it reads (most recent usually; sometimes an earlier one as well)
        reads = []
        if prev:
            reads.append(prev[-1])
            if len(prev) > 1 and rng.random() < 0.35:
                reads.append(rng.choice(prev[:-1]))
        kind = (
            rng.choice(["contract", "contract", "elementwise", "epilogue"])
            if prev
            else rng.choice(["contract", "contract", "elementwise"])
        )
        if kind == "epilogue" and len(reads) == 1 and len(self.decls[reads[0]][2]) >= 1:
            return self._epilogue(reads[0])
        if kind == "epilogue":
            kind = "elementwise"
        # indices: those of the intermediates read first (permuted), then fresh ones
        sizes: dict[str, int] = {}
        accesses: list[tuple[str, list[str]]] = []
        names = iter(IDX)
        for r in reads:
            shape = self.decls[r][2]
            if r == reads[0]:
                idx = [next(names) for _ in shape]
                if rng.random() < 0.3:
                    rng.shuffle(idx)  # transposed read
                for x, s in zip(idx, shape):
                    sizes[x] = s
            else:
                # a second intermediate: reuse indices of matching size where possible
                idx = []
                for s in shape:
                    cand = [x for x, sz in sizes.items() if sz == s and x not in idx]
                    if cand and rng.random() < 0.8:
                        idx.append(rng.choice(cand))
                    else:
                        x = next(names)
                        sizes[x] = s
                        idx.append(x)
            accesses.append((r, idx))
        if not reads:
            ndims = rng.choice([1, 2, 2, 3])
            for _ in range(ndims):
                sizes[next(names)] = rng.choice(SIZES)
        all_idx = list(sizes)
        if kind == "contract":
            # choose reduction indices among existing and possibly add one fresh
            red = [x for x in all_idx if rng.random() < 0.4]
            if not red or rng.random() < 0.4:
                x = next(names)
                sizes[x] = rng.choice(SIZES)
                red.append(x)
            outs = [x for x in sizes if x not in red]
            if rng.random() < 0.5:
                x = next(names)
                sizes[x] = rng.choice(SIZES)
                outs.append(x)
            if not outs:
                x = next(names)
                sizes[x] = rng.choice(SIZES)
                outs.append(x)
        else:
            outs = list(sizes)
            if rng.random() < 0.3 and len(outs) < 3:
                x = next(names)
                sizes[x] = rng.choice(SIZES)
                outs.append(x)
            red = []
        # shrink sizes until the iterations fit
        while math.prod(sizes.values()) > 32:
            # only fresh (non-intermediate) indices can shrink; otherwise give up
            fixed = {x for _, idx in accesses for x in idx}
            free = [x for x in sizes if x not in fixed and sizes[x] > 1]
            if not free:
                raise ValueError("too big")
            x = rng.choice(free)
            sizes[x] = max(s for s in SIZES if s < sizes[x])
        if len(outs) > 3:
            raise ValueError("rank")
        # other inputs: cover every index not yet read (reductions must be read)
        covered = {x for _, idx in accesses for x in idx}
        need = [x for x in sizes if x not in covered and (x in red or rng.random() < 0.8)]
        n_more = 0 if not need and accesses and rng.random() < 0.5 else rng.choice([1, 1, 2])
        if kind == "contract" and not accesses:
            n_more = 2
        groups = [[] for _ in range(max(n_more, 1 if need else 0))]
        for x in need:
            rng.choice(groups).append(x)
        for g in groups:
            extra = [x for x in sizes if x not in g and rng.random() < 0.4]
            idx = g + extra
            if len(idx) > 3:
                idx = idx[:3]
                if any(x in red and x not in idx for x in g):
                    raise ValueError("cover")
            rng.shuffle(idx)
            name = self.new_input([sizes[x] for x in idx])
            accesses.append((name, idx))
        covered = {x for _, idx in accesses for x in idx}
        if any(x not in covered for x in red):
            raise ValueError("cover")
        if not accesses:
            raise ValueError("no reads")
        outs_order = outs[:]
        if rng.random() < 0.3:
            rng.shuffle(outs_order)
        out_name = self.new_tmp([sizes[x] for x in outs_order])
        terms = [self.access(n, idx) for n, idx in accesses]
        if kind == "contract":
            expr = " * ".join(terms)
            # a `new` buffer updated with += needs its start
            self.stmts.append(f"{self.access(out_name, outs_order)} = 0")
            self.stmts.append(f"{self.access(out_name, outs_order)} += {expr}")
        else:
            op = rng.choice([" + ", " * "])
            expr = op.join(terms)
            if len(terms) == 1:
                expr = rng.choice([f"{terms[0]} * 2", f"max({terms[0]}, 0)", f"{terms[0]} + 1"])
            elif rng.random() < 0.3:
                expr = f"max({expr}, 0)"
            self.stmts.append(f"{self.access(out_name, outs_order)} = {expr}")
        # shape check for every access
        return out_name

    def _epilogue(self, tmp: str) -> str:
        rng = self.rng
        shape = self.decls[tmp][2]
        idx = list(IDX[: len(shape)])
        j = rng.randrange(len(shape))
        bias = self.new_input([shape[j]])
        c = self.access(tmp, idx)
        form = rng.choice(["max({c} + {b}, 0)", "{c} + {b}", "{c} * {b}"])
        self.stmts.append(f"{c} = " + form.format(c=c, b=self.access(bias, [idx[j]])))
        return tmp

    def program(self, n: int) -> str:
        prev: list[str] = []
        for _ in range(n):
            out = self.einsum(prev)
            if out not in prev:
                prev.append(out)
            else:
                prev.remove(out)
                prev.append(out)
        last = prev[-1]
        kind, dt, shape = self.decls[last]
        self.decls[last] = ("inout" if self.inout else "out", dt, shape)
        lines = []
        for name in self.order:
            kind, dt, shape = self.decls[name]
            dims = f"[{', '.join(map(str, shape))}]" if shape else ""
            lines.append(f"{kind} {name}: {dt}{dims}")
        return "\n".join(lines + self.stmts) + "\n"


def random_program(rng: random.Random, inout: bool = False) -> str:
    while True:
        g = Gen(rng, inout)
        try:
            return g.program(rng.choice([1, 2, 2, 3, 3]))
        except (ValueError, StopIteration):
            continue


if __name__ == "__main__":
    import sys

    rng = random.Random(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    for _ in range(int(sys.argv[2]) if len(sys.argv) > 2 else 5):
        print(random_program(rng))
        print("-----")
