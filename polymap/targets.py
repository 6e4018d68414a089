"""GPU descriptions for the cost model: how many SMs, threads, registers, bytes and FLOP/s.

A :class:`GpuTarget` is a frozen value; :data:`H100` (SXM5), :data:`H200` (SXM),
:data:`A100` (SXM4 80GB) and :data:`L40S` are provided, and :func:`get_target` resolves a
name or a TOML file (``--target my_gpu.toml`` on the command line) or passes a target through.

To describe another GPU, construct a ``GpuTarget`` (every field is checked on
construction), derive one from a known target with ``dataclasses.replace(H100, sm_count=114,
...)``, or load one from configuration with :meth:`GpuTarget.from_dict`, which names the
bad field when a value is missing, unknown, of the wrong type or out of range::

    GpuTarget.from_dict({
        "name": "H100 PCIe", "compute_capability": [9, 0], "sm_count": 114, ...
    })

Sources of the numbers (cited again next to each value):

* [CC90] CUDA C++ Programming Guide, "Compute Capabilities", table "Technical
  Specifications per Compute Capability", column 9.0: warp size, threads per block and
  per SM, resident blocks per SM, 32-bit registers per SM / block / thread, shared memory
  per SM and per block (default and opt-in).
* [H100] NVIDIA H100 Tensor Core GPU datasheet (SXM column) and the "NVIDIA H100 Tensor
  Core GPU Architecture" whitepaper (H100 SXM5: 132 SMs, 128 FP32 lanes per SM, 50 MB L2).
* [H200] NVIDIA H200 Tensor Core GPU datasheet (SXM column): same GH100 compute as the
  H100 SXM, 141 GB HBM3e at 4.8 TB/s.
* [CC80], [CC89] The same table, columns 8.0 (A100) and 8.9 (L40S): 8.9 holds 1536
  threads and 24 blocks per SM, 100 KB of shared memory per SM and 99 KB per block.
* [A100] NVIDIA A100 Tensor Core GPU datasheet (80GB SXM column) and the "NVIDIA A100 Tensor
  Core GPU Architecture" whitepaper: 108 SMs of 64 FP32 lanes, 40 MB L2, 1410 MHz boost.
* [L40S] NVIDIA L40S datasheet: 18176 CUDA cores (142 SMs of 128), 91.6 TFLOPS FP32,
  48 GB GDDR6 at 864 GB/s, 96 MB L2.
* [OCC] The CUDA Occupancy Calculator (``cudaOccupancyMaxActiveBlocksPerMultiprocessor``
  and the Nsight Compute occupancy section): allocation units of registers and shared memory.
* [CUDA-BP] CUDA C++ Best Practices Guide, "Coalesced Access to Global Memory": global
  memory is served in 32-byte sectors; an L1/L2 cache line is 128 bytes (4 sectors).
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from polymap.errors import ArgumentError

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser, published as tomli before it joined the standard library
    import tomli as tomllib

KIB = 1024
MIB = 1024 * KIB
_MOST_INT = 2**40  # counts and bytes per SM, block or device: beyond any GPU, and exact in SCIP's doubles
# rates in bytes, FLOP or cycles per second: a real GPU lies well inside, and the model's times
# (microseconds) stay coefficients SCIP computes with
_RATE_RANGES = {
    "dram_bandwidth": (1e9, 1e16),
    "peak_fp32_flops": (1e9, 1e17),
    "clock_hz": (1e7, 1e11),
    "memory_latency_s": (1e-8, 1e-4),
    "cache_bandwidth": (1e9, 1e17),  # 10 ns to 100 us: DRAM latencies are near 0.5-2 us
}


@dataclass(frozen=True, slots=True)
class GpuTarget:
    """One GPU as the cost model sees it. Sizes are in bytes, rates per second.

    Construction checks every field (types, ranges and the relations between them, e.g.
    a block's shared memory cannot exceed an SM's) and raises ArgumentError naming it.
    """

    name: str
    """Human-readable name, e.g. ``"NVIDIA H100 SXM5"``."""
    compute_capability: tuple[int, int]
    """(major, minor), e.g. (9, 0) for Hopper; selects the ``sm_XY`` code generation target."""
    sm_count: int
    """Streaming multiprocessors on the chip."""
    max_threads_per_sm: int
    """Resident threads per SM (2048 on cc 9.0: 64 warps)."""
    max_blocks_per_sm: int
    """Resident thread blocks per SM (32 on cc 9.0)."""
    registers_per_sm: int
    """32-bit registers per SM (65536 on cc 9.0)."""
    shared_memory_per_sm: int
    """Shared memory per SM in bytes, the part of the unified L1/shared array that can be
    carved out as shared memory (228 KB on cc 9.0)."""
    shared_memory_per_block_optin: int
    """Largest dynamic shared memory a block may request after opting in with
    ``cudaFuncSetAttribute(..., cudaFuncAttributeMaxDynamicSharedMemorySize, ...)``
    (227 KB on cc 9.0; the 1 KB difference per block is reserved by the system)."""
    l2_cache_bytes: int
    """Size of the L2 cache."""
    dram_bandwidth: float
    """Peak device-memory bandwidth in bytes/s (datasheet figure, not a measurement)."""
    peak_fp32_flops: float
    """Peak FP32 FLOP/s without tensor cores (an FMA counts as two)."""
    clock_hz: float
    """Maximum SM (boost) clock in Hz."""
    memory_bytes: int
    """Device memory capacity as the datasheet states it (decimal GB); the amount the driver
    reports usable is slightly different."""
    warp_size: int = 32
    """Threads per warp [CC90]; 32 on every NVIDIA GPU so far."""
    max_threads_per_block: int = 1024
    """Threads per block [CC90]."""
    max_registers_per_block: int = 65536
    """32-bit registers one block may use [CC90]."""
    max_registers_per_thread: int = 255
    """32-bit registers one thread may use [CC90]."""
    shared_memory_per_block: int = 48 * KIB
    """Shared memory a block gets without opting in (static plus dynamic) [CC90]."""
    register_allocation_unit: int = 256
    """Registers are given to warps in units of this many [OCC]: a warp of 40-register threads
    holds ceil(40 * 32 / 256) * 256 = 1280 registers."""
    register_sub_partitions: int = 4
    """An SM's registers are split among this many sub-partitions (one per warp scheduler), and
    a warp's registers come from one of them [OCC]."""
    shared_memory_allocation_unit: int = 128
    """A block's shared memory is rounded up to a multiple of this many bytes [OCC]."""
    shared_memory_reserved_per_block: int = 1 * KIB
    """Shared memory the system reserves for each resident block on cc 8.0 and later [CC90]."""
    shared_memory_bytes_per_clock: int = 128
    """Shared memory an SM serves per clock: 32 banks of 32 bits each [CC90], one wavefront (a
    warp's 32-bit access without bank conflicts) per clock."""
    sector_bytes: int = 32
    """Granularity of a global memory transaction [CUDA-BP]."""
    cache_line_bytes: int = 128
    """L1/L2 cache line, four sectors [CUDA-BP]."""
    max_block_dim_x: int = 1024
    """Largest blockDim.x [CC90]."""
    max_block_dim_y: int = 1024
    """Largest blockDim.y [CC90]."""
    max_block_dim_z: int = 64
    """Largest blockDim.z [CC90]."""
    max_grid_dim_x: int = 2**31 - 1
    """Largest gridDim.x [CC90]."""
    max_grid_dim_y: int = 65535
    """Largest gridDim.y [CC90]."""
    max_grid_dim_z: int = 65535
    """Largest gridDim.z [CC90]."""
    memory_latency_s: float = 1.3e-6
    """Seconds a thread waits for its first global load under load: with at most
    ``sm_count * max_threads_per_sm`` threads resident, a launch of more threads than that
    takes at least this long per wave of them (Little's law: the bytes in flight bound the
    bandwidth). Calibrated on an H100 80GB HBM3 from pinned axpy and transpose mappings whose
    time fell as their threads took more points each (docs/benchmarks/2026-11-24-h100.md,
    run 6); not measured on the other targets, which take the same value."""
    cache_bandwidth: float = 8.2e12
    """Bytes per second the caches (L2, and L1 in front of it) serve to reads that hit: the
    roof of a buffer small enough to stay in L2 (``cost_model.cached_buffers``), whose reads
    after the first come from there. Calibrated on an H100 80GB HBM3 from polymap's own
    naive SGEMM (step 1 of docs/calibration.md's ladder): the model's 2269 GB of sector
    traffic ran in 275.9 ms, 8.2 TB/s, where nearly every read hits a cache (each element of
    an operand is read 4096 times, by neighbouring threads); the coalesced step 2 ran faster
    (14 TB/s), so the figure is the lower of the two. Not measured on the other targets,
    which take the same value."""

    def __post_init__(self) -> None:
        self.check()

    # ------------------------------------------------------------------ derived values

    @property
    def warp_instructions_per_second(self) -> float:
        """Warp instructions the whole GPU issues per second: one per clock per warp scheduler
        (one per register sub-partition of an SM)."""
        return self.sm_count * self.register_sub_partitions * self.clock_hz

    @property
    def max_warps_per_sm(self) -> int:
        """Resident warps per SM."""
        return self.max_threads_per_sm // self.warp_size

    @property
    def block_dim_limits(self) -> tuple[int, int, int]:
        """(x, y, z): the largest blockDim on each axis."""
        return self.max_block_dim_x, self.max_block_dim_y, self.max_block_dim_z

    @property
    def grid_dim_limits(self) -> tuple[int, int, int]:
        """(x, y, z): the largest gridDim on each axis."""
        return self.max_grid_dim_x, self.max_grid_dim_y, self.max_grid_dim_z

    @property
    def sm_arch(self) -> str:
        """The NVRTC/nvcc architecture name, e.g. ``"sm_90"``."""
        major, minor = self.compute_capability
        return f"sm_{major}{minor}"

    @property
    def bytes_per_flop(self) -> float:
        """Machine balance: DRAM bytes per FP32 FLOP at peak (the roofline ridge's inverse)."""
        return self.dram_bandwidth / self.peak_fp32_flops

    def one_wave(self, blocks: int) -> bool:
        """Whether a grid of ``blocks`` holds at most one block per SM: no SM ever has a second
        block resident, so neither registers nor shared memory can limit its occupancy."""
        return 0 < blocks <= self.sm_count

    # ------------------------------------------------------------------ validation

    def check(self) -> None:
        """Raise ArgumentError naming the first field that is missing a sane value."""
        if not isinstance(self.name, str) or not self.name.strip():
            raise ArgumentError(f"GpuTarget field 'name' must be a non-empty string, got {self.name!r}")
        cc = self.compute_capability
        if (
            not isinstance(cc, tuple)
            or len(cc) != 2
            or not all(_is_int(v) and v >= 0 for v in cc)
            or cc[0] < 1
        ):
            raise ArgumentError(
                f"GpuTarget {self.name!r}: field 'compute_capability' must be a tuple "
                f"(major, minor) of integers with major >= 1, got {cc!r}"
            )
        for f in dataclasses.fields(self):
            if f.name in ("name", "compute_capability"):
                continue
            value = getattr(self, f.name)
            if f.type == "int":
                if not _is_int(value) or value <= 0:
                    raise ArgumentError(
                        f"GpuTarget {self.name!r}: field {f.name!r} must be a positive integer, got {value!r}"
                    )
                # far beyond any GPU: a typo, and a number SCIP cannot take as a coefficient
                self._require(value <= _MOST_INT, f.name, f"must be at most {_MOST_INT}")
            elif not _is_real(value) or not math.isfinite(value) or value <= 0:
                raise ArgumentError(
                    f"GpuTarget {self.name!r}: field {f.name!r} must be a positive finite number, "
                    f"got {value!r}"
                )
        for name, (low, high) in _RATE_RANGES.items():
            value = getattr(self, name)
            self._require(low <= value <= high, name, f"must be between {low:g} and {high:g}")
        self._require(self.compute_capability[1] <= 9, "compute_capability", "minor version must be 0..9")
        # Relations the hardware guarantees; a violation is a typo in the description.
        self._require(self.warp_size & (self.warp_size - 1) == 0, "warp_size", "must be a power of two")
        for field in ("max_threads_per_block", "max_threads_per_sm"):
            self._require(
                getattr(self, field) % self.warp_size == 0, field, "must be a multiple of warp_size"
            )
        self._require(
            self.max_threads_per_block <= self.max_threads_per_sm,
            "max_threads_per_block",
            "cannot exceed max_threads_per_sm",
        )
        self._require(
            self.max_registers_per_block <= self.registers_per_sm,
            "max_registers_per_block",
            "cannot exceed registers_per_sm",
        )
        self._require(
            self.max_registers_per_thread <= self.max_registers_per_block,
            "max_registers_per_thread",
            "cannot exceed max_registers_per_block",
        )
        self._require(
            self.shared_memory_per_block <= self.shared_memory_per_block_optin,
            "shared_memory_per_block",
            "cannot exceed shared_memory_per_block_optin",
        )
        self._require(
            self.shared_memory_per_block_optin <= self.shared_memory_per_sm,
            "shared_memory_per_block_optin",
            "cannot exceed shared_memory_per_sm",
        )
        for unit, whole in (
            ("register_allocation_unit", "registers_per_sm"),
            ("shared_memory_allocation_unit", "shared_memory_per_sm"),
            ("shared_memory_reserved_per_block", "shared_memory_per_sm"),
        ):
            self._require(getattr(self, unit) <= getattr(self, whole), unit, f"cannot exceed {whole}")
        self._require(
            self.cache_line_bytes % self.sector_bytes == 0,
            "cache_line_bytes",
            "must be a multiple of sector_bytes",
        )

    def _require(self, ok: bool, field: str, what: str) -> None:
        if not ok:
            raise ArgumentError(
                f"GpuTarget {self.name!r}: field {field!r} {what} (got {getattr(self, field)!r})"
            )

    # ------------------------------------------------------------------ (de)serialization

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GpuTarget:
        """A target from a mapping of field names to values (e.g. parsed JSON or TOML).

        Fields with a default (warp size, sector size, ...) may be left out; every other
        field is required. ``compute_capability`` may be a list. Unknown, missing and
        ill-typed fields raise ArgumentError naming the field."""
        if not isinstance(data, Mapping):
            raise ArgumentError(f"GpuTarget.from_dict expects a mapping, got {type(data).__name__}")
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - set(fields))
        if unknown:
            raise ArgumentError(
                f"GpuTarget.from_dict: unknown field(s) {', '.join(map(repr, unknown))}; "
                f"known fields: {', '.join(fields)}"
            )
        missing = [
            name for name, f in fields.items() if name not in data and f.default is dataclasses.MISSING
        ]
        if missing:
            raise ArgumentError(
                f"GpuTarget.from_dict: missing required field(s) {', '.join(map(repr, missing))}"
            )
        values = dict(data)
        cc = values["compute_capability"]
        if isinstance(cc, list):
            values["compute_capability"] = tuple(cc)
        return cls(**values)

    @classmethod
    def from_toml(cls, path: str | Path) -> GpuTarget:
        """A target from a TOML file of its fields (:meth:`from_dict`), e.g.::

            base = "h100"            # optional: start from a known target's fields
            name = "NVIDIA H100 PCIe"
            sm_count = 114
            dram_bandwidth = 2.0e12
            peak_fp32_flops = 51.2e12
            clock_hz = 1.755e9

        Without ``base`` every field without a default is required. A missing file, a TOML
        syntax error (with its line and column) and a bad field raise ArgumentError naming
        the file."""
        file = Path(path)
        where = f"GPU target file {str(file)!r}"
        try:
            text = file.read_text(encoding="utf-8-sig")  # an editor's byte-order mark is not TOML
        except OSError as exc:
            raise ArgumentError(f"cannot read {where}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise ArgumentError(f"{where} is not UTF-8 text") from None
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ArgumentError(f"{where}: {exc}") from None
        base = data.pop("base", None)
        if base is not None:
            # a built-in name only: a file as base could name itself, and would be read
            # relative to the working directory rather than to this file
            key = _target_key(base) if isinstance(base, str) else None
            if key not in _TARGETS:
                raise ArgumentError(
                    f"{where}: 'base' must be the name of a built-in target ({', '.join(_TARGETS)}), got {base!r}"
                )
            known = _TARGETS[key]
            if "name" not in data:  # not the base's name: this is another GPU
                changed = sorted(k for k in data if k in known.to_dict())
                data["name"] = f"{known.name}, modified ({', '.join(changed) or 'no field'})"
            data = {**known.to_dict(), **data}
        try:
            return cls.from_dict(data)
        except ArgumentError as exc:
            raise ArgumentError(f"{where}: {exc.message}") from None

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict; ``GpuTarget.from_dict(t.to_dict()) == t``."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["compute_capability"] = list(self.compute_capability)
        return out


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# ---------------------------------------------------------------------------- known GPUs

H100 = GpuTarget(
    name="NVIDIA H100 SXM5",
    compute_capability=(9, 0),  # Hopper GH100 [CC90]
    sm_count=132,  # H100 SXM5 enables 132 of the GH100's 144 SMs [H100 whitepaper]
    max_threads_per_sm=2048,  # [CC90] max resident threads per SM (64 warps)
    max_blocks_per_sm=32,  # [CC90] max resident blocks per SM
    registers_per_sm=64 * KIB,  # [CC90] 64K 32-bit registers per SM
    shared_memory_per_sm=228 * KIB,  # [CC90] max shared memory per SM: 228 KB
    shared_memory_per_block_optin=227 * KIB,  # [CC90] max per block with opt-in: 227 KB
    l2_cache_bytes=50 * MIB,  # [H100] 50 MB L2 (the driver reports 52428800 bytes)
    dram_bandwidth=3.35e12,  # [H100] datasheet, SXM: 3.35 TB/s HBM3
    # [H100] datasheet, SXM: 67 TFLOPS FP32 (non-tensor) = 132 SMs * 128 lanes * 2 * 1.98 GHz.
    peak_fp32_flops=67e12,
    clock_hz=1.98e9,  # max boost clock of the SXM5 part, consistent with the FP32 peak above
    memory_bytes=80 * 10**9,  # [H100] datasheet, SXM: 80 GB HBM3
)
"""NVIDIA H100 SXM5 (80 GB HBM3): the reference target of polymap."""

H200 = dataclasses.replace(
    H100,
    name="NVIDIA H200 SXM",
    # [H200] datasheet: the same GH100 compute as H100 SXM (132 SMs, 67 TFLOPS FP32, 50 MB L2,
    # same cc 9.0 limits); only the memory differs.
    dram_bandwidth=4.8e12,  # [H200] datasheet, SXM: 4.8 TB/s HBM3e
    memory_bytes=141 * 10**9,  # [H200] datasheet, SXM: 141 GB HBM3e
)
"""NVIDIA H200 SXM (141 GB HBM3e): H100 SXM compute with more, faster memory."""

A100 = GpuTarget(
    name="NVIDIA A100 SXM4 80GB",
    compute_capability=(8, 0),  # Ampere GA100 [CC80]
    sm_count=108,  # A100 enables 108 of the GA100's 128 SMs [A100]
    max_threads_per_sm=2048,  # [CC80] 64 warps
    max_blocks_per_sm=32,  # [CC80]
    registers_per_sm=64 * KIB,  # [CC80]
    shared_memory_per_sm=164 * KIB,  # [CC80] max shared memory per SM: 164 KB
    shared_memory_per_block_optin=163 * KIB,  # [CC80] max per block with opt-in: 163 KB
    l2_cache_bytes=40 * MIB,  # [A100] 40 MB L2
    dram_bandwidth=2.039e12,  # [A100] datasheet, 80GB SXM: 2039 GB/s HBM2e
    # [A100] datasheet: 19.5 TFLOPS FP32 (non-tensor) = 108 SMs * 64 lanes * 2 * 1.41 GHz
    peak_fp32_flops=19.5e12,
    clock_hz=1.41e9,  # boost clock, consistent with the FP32 peak above
    memory_bytes=80 * 10**9,  # [A100] datasheet: 80 GB HBM2e
)
"""NVIDIA A100 SXM4 (80 GB HBM2e), compute capability 8.0."""

L40S = GpuTarget(
    name="NVIDIA L40S",
    compute_capability=(8, 9),  # Ada Lovelace AD102 [CC89]
    sm_count=142,  # [L40S] 18176 CUDA cores / 128 per SM
    max_threads_per_sm=1536,  # [CC89] 48 warps
    max_blocks_per_sm=24,  # [CC89]
    registers_per_sm=64 * KIB,  # [CC89]
    shared_memory_per_sm=100 * KIB,  # [CC89] max shared memory per SM: 100 KB
    shared_memory_per_block_optin=99 * KIB,  # [CC89] max per block with opt-in: 99 KB
    l2_cache_bytes=96 * MIB,  # [L40S] 96 MB L2
    dram_bandwidth=864e9,  # [L40S] datasheet: 864 GB/s GDDR6
    # [L40S] datasheet: 91.6 TFLOPS FP32 = 142 SMs * 128 lanes * 2 * 2.52 GHz
    peak_fp32_flops=91.6e12,
    clock_hz=2.52e9,  # boost clock, consistent with the FP32 peak above
    memory_bytes=48 * 10**9,  # [L40S] datasheet: 48 GB GDDR6
)
"""NVIDIA L40S (48 GB GDDR6), compute capability 8.9: fewer resident threads per SM (1536)."""

_TARGETS: dict[str, GpuTarget] = {
    "h100": H100,
    "h100-sxm": H100,
    "h100-sxm5": H100,
    "h200": H200,
    "h200-sxm": H200,
    "a100": A100,
    "a100-sxm": A100,
    "a100-sxm4": A100,
    "l40s": L40S,
}


def _target_key(name: str) -> str:
    """A target name as :data:`_TARGETS` spells it: any case, ``_`` and spaces read as ``-``."""
    return name.strip().lower().replace("_", "-").replace(" ", "-")


def known_targets() -> tuple[str, ...]:
    """The names :func:`get_target` accepts (case-insensitive; ``_`` and spaces read as ``-``)."""
    return tuple(_TARGETS)


def get_target(target: str | Path | GpuTarget) -> GpuTarget:
    """The target named ``target`` ("h100", "h200", "a100", "l40s", ... in any case), the
    target described by a TOML file (a path ending in ``.toml``: :meth:`GpuTarget.from_toml`),
    or ``target`` itself when it already is a GpuTarget. Raises ArgumentError otherwise."""
    if isinstance(target, GpuTarget):
        return target
    if isinstance(target, Path) or (isinstance(target, str) and target.strip().lower().endswith(".toml")):
        return GpuTarget.from_toml(target)
    if not isinstance(target, str):
        raise ArgumentError(
            f"a GPU target is a name, a .toml file or a GpuTarget, got {type(target).__name__}; "
            f"known names: {', '.join(_TARGETS)}"
        )
    try:
        return _TARGETS[_target_key(target)]
    except KeyError:
        raise ArgumentError(
            f"unknown GPU target {target!r}; known names: {', '.join(_TARGETS)} "
            f"(or describe your GPU in a .toml file of GpuTarget's fields, or with GpuTarget(...))"
        ) from None
