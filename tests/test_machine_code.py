"""Machine code read without a GPU: SASS and resource parsing on fixed text, occupancy counted
by hand, and NVRTC + cuobjdump on hand-written kernels whose machine code is known by
construction (a float4 load, a dynamically indexed array, a loop of four FMAs)."""

from __future__ import annotations

from pathlib import Path

import pytest

import polymap
from polymap.cli import main
from polymap.errors import ArgumentError, MachineCodeError
from polymap.machine_code.occupancy import occupancy
from polymap.machine_code.report import format_report, full_block_lines, hot_loop_issue_time
from polymap.machine_code.sass import (
    InstructionMix,
    body,
    hot_loop,
    loops,
    parse_line_info,
    parse_resources,
    parse_sass,
)
from polymap.poly.affinity import analyze_binding_defaults
from polymap.runtime import cuobjdump
from polymap.runtime.nvrtc import compile_cubin, nvrtc_available
from polymap.targets import H100

MODELS = Path(__file__).resolve().parent.parent / "models"

needs_tools = pytest.mark.skipif(
    not (nvrtc_available() and cuobjdump.cuobjdump_available()),
    reason="NVRTC or cuobjdump missing (pip install -e '.[test]' installs both)",
)

# The shape of `cuobjdump -sass` output (encodings shortened): two nested loops, the inner one
# with a predicated backward branch that also names a predicate operand.
SASS = """
	code for sm_90
		Function : k_outer_inner
	.headerflags	@"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;              /* 0x00000a00ff017b82 */
        /*0010*/                   LDG.E.128 R4, desc[UR4][R2.64] ;    /* 0x0000000402047981 */
        /*0020*/                   STS.128 [R0], R4 ;                  /* 0x0000000400007388 */
        /*0030*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;       /* 0x0000000000007b1d */
        /*0040*/                   LDS.64 R8, [R0] ;                   /* 0x0000000000087984 */
        /*0050*/                   FFMA R10, R8, R9, R10 ;             /* 0x000000090a0a7223 */
        /*0060*/                   LDS R11, [R0+0x4] ;                 /* 0x0000040000087984 */
        /*0070*/               @P0 FFMA R10, R11, R11, R10 ;           /* 0x0000000b0a0a7223 */
        /*0080*/                   HFMA2.MMA R12, -RZ, RZ, 0, 0 ;      /* 0x00000000ff0c7435 */
        /*0090*/              @!P0 BRA P2, 0x40 ;                      /* 0x0000000000009947 */
        /*00a0*/                   STL [R1], R10 ;                     /* 0x0000000a01007387 */
        /*00b0*/               @P1 BRA 0x10 ;                          /* 0x0000000000009947 */
        /*00c0*/                   STG.E [R2.64], R10 ;                /* 0x0000000a02007986 */
        /*00d0*/                   EXIT ;                              /* 0x000000000000794d */
        /*00e0*/                   BRA 0xe0;                           /* 0xfffffffc00fc7947 */
        /*00f0*/                   NOP;                                /* 0x0000000000007918 */
		Function : k_straight
        /*0000*/                   EXIT ;                              /* 0x000000000000794d */
"""

RESOURCES = """
Resource usage:
 Common:
  GLOBAL:4 CONSTANT[4]:8
 Function k_outer_inner:
  REG:40 STACK:16 SHARED:34304 LOCAL:8 CONSTANT[0]:564 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function k_straight:
  REG:8 STACK:0 SHARED:0 LOCAL:0 CONSTANT[0]:528 TEXTURE:0 SURFACE:0 SAMPLER:0
"""


def test_sass_is_read_per_function_with_guards_modifiers_and_branch_targets():
    functions = parse_sass(SASS)
    assert sorted(functions) == ["k_outer_inner", "k_straight"]
    code = functions["k_outer_inner"]
    assert len(code) == 16 and len(functions["k_straight"]) == 1
    assert code[1].opcode == "LDG.E.128" and code[1].family == "LDG" and code[1].width_bits == 128
    assert code[4].width_bits == 64 and code[6].width_bits == 32
    assert code[7].guard == "@P0" and code[7].family == "FFMA"
    assert code[9].branch_target == 0x40 and code[11].branch_target == 0x10
    assert code[5].branch_target is None


def test_loops_are_backward_branches_and_the_hot_loop_is_the_deepest_innermost():
    code = parse_sass(SASS)["k_outer_inner"]
    found = {(loop.start, loop.end): loop.depth for loop in loops(code)}
    # the branch to itself at 0xe0 (where a thread parks after EXIT) is no loop
    assert found == {(0x10, 0xB0): 0, (0x40, 0x90): 1}
    hot = hot_loop(code)
    assert (hot.start, hot.end, hot.depth) == (0x40, 0x90, 1)
    mix = InstructionMix.of(body(code, hot))
    assert (mix.instructions, mix.fma, mix.shared_loads) == (6, 2, 2)
    assert mix.fma_per_shared_load == 1.0 and mix.fma_share == pytest.approx(2 / 6)
    assert mix.load_widths == ((32, 1), (64, 1))
    assert hot_loop(parse_sass(SASS)["k_straight"]) is None


def test_the_whole_kernel_mix_counts_each_family_and_skips_padding():
    mix = InstructionMix.of(parse_sass(SASS)["k_outer_inner"])
    assert mix.instructions == 15  # the NOP is padding, not an issued instruction
    assert (mix.fp32_fma, mix.fma) == (2, 2)  # HFMA2.MMA is ptxas's register move, not an FMA
    assert (mix.global_loads, mix.global_stores, mix.shared_stores) == (1, 1, 1)
    assert (mix.local_accesses, mix.barriers, mix.async_copies) == (1, 1, 0)
    assert mix.widest_load_bits == 128


def test_resource_usage_is_read_per_function():
    used = parse_resources(RESOURCES)
    assert set(used) == {"k_outer_inner", "k_straight"}
    k = used["k_outer_inner"]
    assert (k.registers, k.stack, k.shared, k.local, k.constant) == (40, 16, 34304, 8, 564)
    assert used["k_straight"].registers == 8


@needs_tools
def test_ptxas_for_sm_90_counts_the_system_reserve_in_a_kernels_shared_memory():
    """The fact ``reserve_in_ptxas_figure`` relies on: if a new NVRTC changes it, this fails."""
    source = r"""
    extern "C" __global__ void s(float* y) {
      __shared__ float x[32];
      x[threadIdx.x] = y[threadIdx.x]; __syncthreads(); y[threadIdx.x] = x[31 - threadIdx.x];
    }"""
    assert parse_resources(cuobjdump.resource_usage(compile_cubin(source, arch="sm_90")))["s"].shared == 1152
    assert parse_resources(cuobjdump.resource_usage(compile_cubin(source, arch="sm_80")))["s"].shared == 128


@pytest.mark.parametrize(
    "threads, registers, shared, blocks, limiter",
    [
        (1024, 16, 0, 2, "threads"),  # 64 warp slots / 32 warps
        (1024, 32, 0, 2, "registers and threads"),  # 32 * 32 = 1024 per warp: 64 warps by either
        (256, 64, 0, 4, "registers"),  # 64 * 32 = 2048 per warp: 32 warps, 4 blocks of 8
        (256, 40, 0, 6, "registers"),  # 40 * 32 = 1280 per warp: 51 warps, 6 blocks of 8
        (128, 16, 48 * 1024, 4, "shared memory"),  # 228 KiB / (48 KiB + 1 KiB reserved)
        (32, 16, 0, 32, "blocks"),  # 32 resident blocks at most
        (64, 16, 0, 32, "threads and blocks"),  # 64 warp slots / 2 warps = 32 = the block slots
        (1024, 255, 0, 0, "registers"),  # 8192 per warp: 8 warps, not one block of 32
        # a sub-partition (16384 registers) holds whole warps: 33 registers, 1280 per warp,
        # 12 warps per quarter, 48 per SM, 24 blocks of 2 (the whole SM's 51 would say 25)
        (64, 33, 0, 24, "registers"),
        (64, 48, 0, 20, "registers"),  # 1536 per warp: 10 per quarter, 40 per SM
        # 25 warps are checked as 28 (a multiple of 4) x 2560 = 71680 > 65536: no block fits
        (800, 73, 0, 0, "registers"),
    ],
)
def test_occupancy_follows_the_occupancy_calculator(threads, registers, shared, blocks, limiter):
    occ = occupancy(H100, threads_per_block=threads, registers=registers, shared_bytes=shared)
    assert (occ.blocks_per_sm, occ.limiter) == (blocks, limiter)
    assert occ.warps_per_sm == blocks * -(-threads // 32)
    assert occ.fraction == pytest.approx(occ.warps_per_sm / 64)


def test_the_system_reserve_is_counted_once():
    # 45 KiB + 1 KiB reserve: 4 blocks in 228 KiB; with the reserve counted twice only 4 as well,
    # so take 56 KiB: 228 // 57 = 4 with one reserve, 228 // 58 = 3 with two
    once = occupancy(H100, threads_per_block=64, registers=16, shared_bytes=57 * 1024, reserve_included=True)
    assert once.blocks_per_sm == 4
    twice = occupancy(H100, threads_per_block=64, registers=16, shared_bytes=57 * 1024)
    assert twice.blocks_per_sm == 3


KNOWN = r"""
extern "C" __global__ void wide(const float4* __restrict__ x, float4* __restrict__ y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  y[i] = x[i];
}
extern "C" __global__ void spilled(const float* x, const int* at, float* y, int n) {
  float scratch[32];
  for (int k = 0; k < 32; ++k) scratch[k] = 0.f;
  for (int k = 0; k < n; ++k) scratch[at[k] & 31] += x[k];  // indices only known at run time
  y[threadIdx.x] = scratch[at[threadIdx.x] & 31];
}
extern "C" __global__ void four_fma(const float* a, float* y, int n) {
  float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
  #pragma unroll 1
  for (int k = 0; k < n; ++k) {
    float v = a[k];
    s0 = fmaf(v, 1.5f, s0); s1 = fmaf(v, 2.5f, s1); s2 = fmaf(v, 3.5f, s2); s3 = fmaf(v, 4.5f, s3);
  }
  y[threadIdx.x] = s0 + s1 + s2 + s3;
}
"""


@needs_tools
def test_nvrtc_and_cuobjdump_see_what_hand_written_kernels_do():
    cubin = compile_cubin(KNOWN, arch="sm_90")
    code = parse_sass(cuobjdump.sass(cubin))
    used = parse_resources(cuobjdump.resource_usage(cubin))
    assert set(code) == set(used) == {"wide", "spilled", "four_fma"}
    wide = InstructionMix.of(code["wide"])
    assert wide.global_loads == 1 and wide.widest_load_bits == 128 and hot_loop(code["wide"]) is None
    assert used["wide"].shared == 0
    assert used["spilled"].stack >= 32 * 4 and InstructionMix.of(code["spilled"]).local_accesses > 0
    assert used["wide"].stack == 0 and used["four_fma"].stack == 0
    hot = InstructionMix.of(body(code["four_fma"], hot_loop(code["four_fma"])))
    assert (hot.fp32_fma, hot.global_loads) == (4, 1)


@needs_tools
def test_a_compiled_program_reports_each_launch_with_the_models_register_estimate():
    kernel = polymap.compile(polymap.load(MODELS / "matmul_256x256x32.te"))
    report = kernel.machine_code()
    assert [k.function for k in report.kernels] == [launch.function for launch in kernel.cuda.launches]
    (k,) = report.kernels
    block = kernel.cuda.launches[0].block
    assert k.threads_per_block == block[0] * block[1] * block[2]
    assert k.model_registers == kernel.mapping.costs[0].registers > 0
    # ptxas for sm_90 counts the 1 KiB the system reserves per block in the figure
    assert k.resources.registers > 0 and k.resources.shared == kernel.mapping.costs[0].shared_bytes + 1024
    assert k.reserve_in_shared and k.model_shared == kernel.mapping.costs[0].shared_bytes
    # the k loop over a staged tile: FMAs fed by shared loads
    assert k.hot is not None and k.hot.fp32_fma > 0 and k.hot.shared_loads > 0
    text = str(report)
    assert f"kernel {k.function}: {k.threads_per_block} threads per block" in text
    assert "not timings" in text


@needs_tools
def test_polymap_inspect_prints_every_kernel(capsys):
    assert main(["inspect", str(MODELS / "gpt3_attention_tiny.te")]) == 0
    out = capsys.readouterr().out
    kernel = polymap.compile(polymap.load(MODELS / "gpt3_attention_tiny.te"))
    for launch in kernel.cuda.launches:
        assert f"kernel {launch.function}:" in out
    assert out.count("registers per thread:") == len(kernel.cuda.launches)


def test_a_missing_cuobjdump_is_a_clean_error_naming_the_package(monkeypatch, capsys):
    monkeypatch.setattr(cuobjdump.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(cuobjdump.shutil, "which", lambda name: None)
    with pytest.raises(MachineCodeError, match="nvidia-cuda-cuobjdump"):
        cuobjdump.resource_usage(b"\x7fELF")
    if nvrtc_available():
        assert main(["inspect", str(MODELS / "axpy.te")]) == 1
        assert "nvidia-cuda-cuobjdump" in capsys.readouterr().err


@needs_tools
def test_a_file_that_is_not_a_cubin_is_a_machine_code_error():
    with pytest.raises(MachineCodeError, match="cuobjdump -sass failed"):
        cuobjdump.sass(b"not an ELF file")


@needs_tools
def test_a_register_tiled_sgemm_is_counted_as_the_compute_bound_code_it_is():
    """The yardstick of issue 10: per k tile, 8 x 64 FFMA against 8 x 4 float4 shared loads,
    nothing on the stack (tests/data/sgemm_128x128x8.cu; the counts follow from its loops)."""
    source = (Path(__file__).parent / "data" / "sgemm_128x128x8.cu").read_text()
    cubin = compile_cubin(source, arch="sm_90")
    code = parse_sass(cuobjdump.sass(cubin))["sgemm_128x128x8"]
    used = parse_resources(cuobjdump.resource_usage(cubin))["sgemm_128x128x8"]
    assert used.stack == 0 and used.shared == 2 * 8 * 128 * 4 + 1024
    hot = InstructionMix.of(body(code, hot_loop(code)))
    assert (hot.fp32_fma, hot.shared_loads, hot.global_loads, hot.barriers) == (512, 32, 2, 2)
    assert hot.load_widths == ((128, 34),)
    assert hot.fma_per_shared_load == 16 and hot.fma_share > 0.8


def test_the_hot_loop_bounds_the_issue_by_its_own_count():
    """2 * 1024^3 flops are 2^25 warp FMAs; a hot loop doing 64 of them in 74 instructions
    runs 2^19 times: 74 * 2^19 warp instructions at one per clock and scheduler."""
    hot = InstructionMix(74, 64, 64, 5, 0, 0, 0, 0, 0, 0, ((128, 5),))
    rate = H100.sm_count * H100.register_sub_partitions * H100.clock_hz
    assert hot_loop_issue_time(H100, 2 * 1024**3, hot) == pytest.approx(74 * 2**19 / rate)
    no_fma = InstructionMix(20, 0, 0, 0, 0, 2, 1, 0, 0, 0, ((32, 2),))
    assert hot_loop_issue_time(H100, 2 * 1024**3, no_fma) is None


@needs_tools
def test_the_model_charges_matmul_1024_at_least_its_hot_loops_issue():
    """Issue 10: the predicted time is never below the bound from the kernel's own hot
    loop; the loop's own instructions (``cost_model.LOOP_STEP_INSTRUCTIONS``) are what the
    model lacked (35.58 us against 37.11 us before they were charged)."""
    program = polymap.load(MODELS / "matmul_1024.te")
    mapping = polymap.optimize(program)
    k = polymap.compile(program, mapping).machine_code().kernels[0]
    assert k.hot_issue_s is not None and k.model_issue_s == mapping.costs[0].issue_s
    assert mapping.costs[0].issue_s >= k.hot_issue_s
    assert mapping.costs[0].time_s >= k.hot_issue_s


@needs_tools
@pytest.mark.slow
@pytest.mark.parametrize("model", sorted(p.name for p in MODELS.glob("*.te")))
def test_no_model_is_predicted_below_its_hot_loops_issue(model):
    program, _, _ = analyze_binding_defaults(polymap.load(MODELS / model))
    kernel = polymap.compile(program)
    for k, cost in zip(kernel.machine_code().kernels, kernel.mapping.costs):
        if k.hot_issue_s is not None:
            assert cost.time_s >= k.hot_issue_s, (model, k.function, cost.time_s, k.hot_issue_s)


@needs_tools
def test_the_copies_of_matmul_1024_load_128_bits_per_lane():
    """Issue 10's figure for the copies: with vector copies the full blocks' function loads
    B's tile with LDG.E.128 (its copy loop is not unrolled: one instruction); pinned
    element-wise, none is wider than 32 bits."""
    program = polymap.load(MODELS / "matmul_1024.te")
    wide = polymap.compile(program).machine_code().kernels[0].whole
    narrow_mapping = polymap.optimize(program, pins={"k": {"copy": 1}})
    narrow = polymap.compile(program, narrow_mapping).machine_code().kernels[0].whole
    assert dict(wide.global_load_widths).get(128, 0) >= 1
    assert set(dict(narrow.global_load_widths)) == {32}


def _assert_no_local_memory(model: Path) -> None:
    program, _, _ = analyze_binding_defaults(polymap.load(model))  # flat indices: sizes bound
    report = polymap.compile(program).machine_code()
    for k in report.kernels:
        assert (k.resources.stack, k.resources.local, k.whole.local_accesses) == (0, 0, 0), (
            f"{model.name} {k.function}: {k.resources.stack} bytes of stack, "
            f"{k.whole.local_accesses} local loads and stores"
        )


@needs_tools
@pytest.mark.parametrize("model", ["matmul_1024.te", "orojenesis_ffn.te"])
def test_per_point_accumulators_are_registers_not_stack(model):
    """Before isl unrolled a thread's points, these kept C_acc[4] on the stack (16 and 32
    bytes, LDL/STL around the k loop): the point loops' trip counts were runtime values."""
    _assert_no_local_memory(MODELS / model)


@needs_tools
def test_a_one_wave_grid_asks_ptxas_for_one_block_per_sm():
    """matmul_256x256x32's 32 blocks are one wave on the H100's 132 SMs: with
    ``__launch_bounds__(128)`` alone (its blocks' size on 2026-11-25) ptxas aimed at 7
    blocks per SM and spilled two 64-bit addresses to reach it (72 registers, 16 bytes of
    stack); asked for one block per SM it keeps them in registers. matmul_1024's 256 blocks
    are two waves: no minimum there."""
    small = polymap.compile(polymap.load(MODELS / "matmul_256x256x32.te"))
    threads = small.mapping.kernels[0].threads_per_block
    assert f"__launch_bounds__({threads}, 1) " in small.source
    _assert_no_local_memory(MODELS / "matmul_256x256x32.te")
    (kernel,) = small.machine_code().kernels
    assert kernel.one_wave and kernel.grid_blocks == 32
    assert "one wave" in format_report(small.machine_code())
    large = polymap.compile(polymap.load(MODELS / "matmul_1024.te"))
    threads = large.mapping.kernels[0].threads_per_block
    assert f"__launch_bounds__({threads}) " in large.source
    (kernel,) = large.machine_code().kernels
    assert not kernel.one_wave
    # 256 blocks on 132 SMs: at most 2 an SM, fewer than its shared memory admits
    assert kernel.grid_per_sm == 2 < kernel.occupancy.blocks_per_sm
    assert "the grid's 256 blocks at the cost sizes give an SM at most 2" in format_report(
        large.machine_code()
    )


@needs_tools
@pytest.mark.slow
@pytest.mark.parametrize("model", sorted(p.name for p in MODELS.glob("*.te")))
def test_no_kernel_of_the_models_uses_local_memory(model):
    _assert_no_local_memory(MODELS / model)


def _cuda_occupancy_header() -> Path | None:
    for root in sorted(Path("/usr/local").glob("cuda*/include"), reverse=True):
        if (root / "cuda_occupancy.h").is_file():
            return root
    return None


OCCUPANCY_ORACLE = r"""
#include <cstdio>
#include "cuda_occupancy.h"
int main() {
  cudaOccDeviceProp p;
  p.computeMajor = 9; p.computeMinor = 0; p.maxThreadsPerBlock = 1024;
  p.maxThreadsPerMultiprocessor = 2048; p.regsPerBlock = 65536; p.regsPerMultiprocessor = 65536;
  p.warpSize = 32; p.sharedMemPerBlock = 48 * 1024; p.sharedMemPerMultiprocessor = 228 * 1024;
  p.numSms = 132; p.sharedMemPerBlockOptin = 227 * 1024; p.reservedSharedMemPerBlock = 1024;
  const int shared[] = {0, 3000, 20000, 48 * 1024};
  for (int regs = 1; regs <= 255; regs += 3)
    for (int threads = 32; threads <= 1024; threads += 32)
      for (int s : shared) {
        cudaOccFuncAttributes a;
        a.maxThreadsPerBlock = 1024; a.numRegs = regs; a.sharedSizeBytes = s;
        a.partitionedGCConfig = PARTITIONED_GC_OFF; a.shmemLimitConfig = FUNC_SHMEM_LIMIT_DEFAULT;
        a.maxDynamicSharedSizeBytes = 0; a.numBlockBarriers = 1;
        cudaOccDeviceState state; cudaOccResult r;
        if (cudaOccMaxActiveBlocksPerMultiprocessor(&r, &p, &a, &state, threads, 0) == CUDA_OCC_SUCCESS)
          std::printf("%d %d %d %d\n", regs, threads, s, r.activeBlocksPerMultiprocessor);
      }
}
"""


@pytest.mark.skipif(_cuda_occupancy_header() is None, reason="no CUDA toolkit's cuda_occupancy.h here")
def test_occupancy_equals_cudas_own_calculator(tmp_path):
    """CUDA's occupancy header, compiled by the host compiler, is the oracle: every register
    count (in steps of 3), block size and a few shared-memory sizes, for the H100's limits."""
    import subprocess

    from polymap.runtime.host import compiler

    source, binary = tmp_path / "occ.cpp", tmp_path / "occ"
    source.write_text(OCCUPANCY_ORACLE)
    subprocess.run(
        [compiler(), "-std=c++17", "-O1", f"-I{_cuda_occupancy_header()}", str(source), "-o", str(binary)],
        check=True,
        capture_output=True,
    )
    rows = subprocess.run([str(binary)], check=True, capture_output=True, text=True).stdout.split("\n")
    checked = 0
    for line in filter(None, rows):
        regs, threads, shared, blocks = map(int, line.split())
        got = occupancy(H100, threads_per_block=threads, registers=regs, shared_bytes=shared)
        assert got.blocks_per_sm == blocks, (regs, threads, shared, got)
        checked += 1
    assert checked == 85 * 32 * 4


def test_two_back_edges_to_one_head_are_one_loop():
    """A ``continue`` gives a loop two back edges; its span runs to the last of them."""
    text = """
		Function : k
        /*0100*/                   FFMA R1, R2, R3, R1 ;
        /*0200*/               @P0 BRA 0x100 ;
        /*0210*/                   FFMA R1, R2, R3, R1 ;
        /*0300*/               @P1 BRA 0x100 ;
        /*0310*/                   EXIT ;
"""
    code = parse_sass(text)["k"]
    assert [(loop.start, loop.end, loop.depth) for loop in loops(code)] == [(0x100, 0x300, 0)]
    assert InstructionMix.of(body(code, hot_loop(code))).fma == 2


@needs_tools
def test_the_report_object_names_its_kernels_and_finds_one():
    kernel = polymap.compile(polymap.load(MODELS / "gpt3_attention_tiny.te"))
    report = kernel.machine_code()
    names = [launch.function for launch in kernel.cuda.launches]
    assert repr(report) == f"<MachineCodeReport of gpt3_attention_tiny for sm_90: {', '.join(names)}>"
    assert report.kernel(names[1]).function == names[1]
    with pytest.raises(ArgumentError, match="no kernel 'nope' in the machine code of gpt3_attention_tiny"):
        report.kernel("nope")


LINE_INFO = """
//--------------------- .text.k_two_copies --------------------------
	.section	.text.k_two_copies,"ax",@progbits
k_two_copies:
	//## File "/tmp/x.cu", line 10
        /*0000*/                   LDC R1, c[0x0][0x28] ;
	//## File "/tmp/x.cu", line 12
        /*0010*/                   FFMA R2, R3, R4, R2 ;
        /*0020*/              @!P0 BRA `(.L_x_0) ;
	//## File "/tmp/x.cu", line 20
        /*0030*/                   FFMA R2, R3, R4, R2 ;
"""


def test_line_information_is_read_per_function_and_address():
    lines = parse_line_info(LINE_INFO)
    assert lines == {"k_two_copies": {0x0: 10, 0x10: 12, 0x20: 12, 0x30: 20}}


def _matmul_250():
    """matmul_256x256x32's program with M and N defaulting to 250: its cost sizes, one wave
    of 32 blocks, have blocks at an edge."""
    text = (MODELS / "matmul_256x256x32.te").read_text()
    return polymap.parse(
        text.replace("param M = 256", "param M = 250").replace("param N = 256", "param N = 250")
    )


@needs_tools
def test_the_hot_loop_of_a_kernel_with_full_blocks_is_in_their_code():
    """matmul_256x256x32 costed at 250 x 250 x 32, one wave with blocks at an edge there,
    keeps its two codes (full blocks, and any block with the points' guards) in one function;
    the compiler may peel the edge copy's loop so that it does an FMA more, but what bounds
    the kernel's speed is the full blocks' loop: every one of its instructions comes from the
    source lines between the full-block test and its ``else`` (line information)."""
    kernel = polymap.compile(_matmul_250())
    assert kernel.source.count("__global__") == 1
    report = kernel.machine_code()
    k = report.kernels[0]
    assert k.full_blocks and k.hot_loop is not None
    span = full_block_lines(kernel.source, k.function)
    assert span is not None and len(span) > 10
    cubin = compile_cubin(kernel.source, name="k.cu", options=("-lineinfo",))
    at = parse_line_info(cuobjdump.line_info(cubin))[k.function]
    inside = [line for address, line in at.items() if k.hot_loop.holds(address)]
    assert inside and all(line in span for line in inside)
    assert "in the code for full blocks" in str(report)


@needs_tools
def test_the_blocks_at_an_edge_are_a_function_of_their_own_reported_beside_the_kernel():
    """A function's registers are the most any of its code needs: matmul_1024 at free sizes
    runs its blocks at an edge in a second function, so that their guarded code does not
    set the full blocks' registers. ``inspect`` reports both, each as ptxas counts it; bound
    so that every block is full, the kernel has no edge function at all. matmul_256x256x32
    costed at 250 x 250 x 32 (one wave of 32 blocks, some at an edge) keeps both codes in
    one function: registers cannot limit its occupancy there, and a second launch would cost
    its own first loads. Costed at 256 x 256 x 32 (one wave, every block full) it has two:
    the edge function costs nothing there, and frees the full blocks' registers at larger
    sizes."""
    program = polymap.load(MODELS / "matmul_1024.te")
    kernel = polymap.compile(program)
    report = kernel.machine_code()
    (k,) = report.kernels
    assert k.edge_function == f"{k.function}_edge"
    with pytest.raises(ArgumentError, match=f"runs the blocks at an edge of kernel '{k.function}'"):
        report.kernel(k.edge_function)
    assert kernel.source.count("__global__") == 2
    cubin = compile_cubin(kernel.source, name="k.cu")
    counted = parse_resources(cuobjdump.resource_usage(cubin))
    assert counted[k.function] == k.resources and counted[k.edge_function] == k.edge_resources
    text = format_report(kernel.machine_code())
    assert (
        f"  blocks at an edge: a function of their own, {k.edge_function}, launched after {k.function} at sizes "
        f"where some block is at an edge: {k.edge_resources.registers} registers per thread" in text
    )
    assert (
        k.edge_occupancy.warps_per_sm
        == occupancy(
            H100,
            threads_per_block=64,
            registers=k.edge_resources.registers,
            shared_bytes=k.edge_resources.shared,
            reserve_included=True,
        ).warps_per_sm
    )
    # the full blocks' function has no guard on a point: its hot loop is the unguarded one
    assert k.hot is not None and k.hot.fma >= 64
    bound = polymap.compile(program.bind(M=1024, N=1024, K=1024))
    assert bound.source.count("__global__") == 1
    assert bound.machine_code().kernels[0].edge_function is None
    one_wave = polymap.compile(_matmul_250())
    assert one_wave.source.count("__global__") == 1 and one_wave.cuda.launches[0].edge is None
    assert "} else {  // a block at an edge: its points guarded" in one_wave.source
    full_there = polymap.compile(polymap.load(MODELS / "matmul_256x256x32.te"))
    assert full_there.source.count("__global__") == 2 and full_there.cuda.launches[0].edge is not None
