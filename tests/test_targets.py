"""GPU targets: the datasheet numbers, name lookup, and validation of user descriptions.

Expected values are copied from the NVIDIA datasheets and the CUDA programming guide's
compute capability 8.0, 8.9 and 9.0 tables, not from polymap.targets.
"""

from __future__ import annotations

import dataclasses

import pytest

from polymap.errors import ArgumentError
from polymap.targets import A100, H100, H200, L40S, GpuTarget, get_target, known_targets


def test_h100_numbers():
    assert H100.compute_capability == (9, 0)
    assert H100.sm_arch == "sm_90"
    assert H100.sm_count == 132
    assert H100.warp_size == 32
    assert H100.max_threads_per_block == 1024
    assert H100.max_threads_per_sm == 2048
    assert H100.max_warps_per_sm == 64
    assert H100.max_blocks_per_sm == 32
    assert H100.registers_per_sm == 65536
    assert H100.max_registers_per_thread == 255
    assert H100.shared_memory_per_sm == 228 * 1024 == 233472
    assert H100.shared_memory_per_block_optin == 227 * 1024 == 232448
    assert H100.shared_memory_per_block == 48 * 1024
    assert H100.l2_cache_bytes == 50 * 1024 * 1024
    assert H100.dram_bandwidth == 3.35e12
    assert H100.peak_fp32_flops == 67e12
    assert H100.sector_bytes == 32
    assert H100.cache_line_bytes == 128
    assert H100.memory_bytes == 80 * 10**9


def test_fp32_peak_agrees_with_sms_lanes_and_clock():
    # 132 SMs * 128 FP32 lanes * 2 FLOP per FMA * 1.98 GHz = 66.9 TFLOP/s, the datasheet's "67".
    assert H100.sm_count * 128 * 2 * H100.clock_hz == pytest.approx(67e12, rel=0.01)


def test_h200_is_h100_compute_with_more_memory():
    assert H200.dram_bandwidth == 4.8e12
    assert H200.memory_bytes == 141 * 10**9
    for field in (
        "sm_count",
        "compute_capability",
        "peak_fp32_flops",
        "l2_cache_bytes",
        "shared_memory_per_sm",
        "registers_per_sm",
        "max_threads_per_sm",
    ):
        assert getattr(H200, field) == getattr(H100, field), field
    assert H200.name != H100.name


@pytest.mark.parametrize(
    "name, expected",
    [
        ("h100", H100),
        ("H100", H100),
        ("h100-sxm", H100),
        ("H100_SXM", H100),
        (" h100 sxm ", H100),
        ("h200", H200),
        ("H200", H200),
        ("a100", A100),
        ("A100-SXM4", A100),
        ("L40S", L40S),
    ],
)
def test_get_target_aliases(name, expected):
    assert get_target(name) is expected


def test_get_target_passes_a_target_through():
    custom = dataclasses.replace(H100, name="H100 PCIe", sm_count=114, dram_bandwidth=2.0e12)
    assert get_target(custom) is custom
    assert "h100" in known_targets() and "h200" in known_targets()


def test_get_target_unknown_lists_known_names():
    with pytest.raises(ArgumentError, match=r"unknown GPU target 'v100'.*h100.*h200.*a100.*l40s"):
        get_target("v100")
    with pytest.raises(ArgumentError, match=r"known names"):
        get_target(90)


def test_targets_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        H100.sm_count = 1  # type: ignore[misc]


def test_from_dict_round_trip():
    data = H100.to_dict()
    assert data["compute_capability"] == [9, 0]
    assert GpuTarget.from_dict(data) == H100


def _h100_dict(**changes):
    data = H100.to_dict()
    data.update(changes)
    return data


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"sm_count": "132"}, "sm_count"),
        ({"sm_count": 0}, "sm_count"),
        ({"sm_count": True}, "sm_count"),
        ({"warp_size": 2.5}, "warp_size"),
        ({"warp_size": 24}, "warp_size"),
        ({"dram_bandwidth": -1.0}, "dram_bandwidth"),
        ({"dram_bandwidth": float("inf")}, "dram_bandwidth"),
        ({"clock_hz": "fast"}, "clock_hz"),
        ({"name": ""}, "name"),
        ({"compute_capability": [9]}, "compute_capability"),
        ({"compute_capability": "9.0"}, "compute_capability"),
        ({"shared_memory_per_block_optin": 300 * 1024}, "shared_memory_per_block_optin"),
        ({"max_threads_per_block": 4096}, "max_threads_per_block"),
        ({"max_threads_per_block": 1000}, "max_threads_per_block"),
        ({"cache_line_bytes": 100}, "cache_line_bytes"),
        ({"max_registers_per_block": 10**6}, "max_registers_per_block"),
    ],
)
def test_from_dict_names_the_bad_field(changes, field):
    with pytest.raises(ArgumentError, match=rf"'{field}'"):
        GpuTarget.from_dict(_h100_dict(**changes))


def test_from_dict_missing_and_unknown_fields():
    data = H100.to_dict()
    del data["sm_count"]
    with pytest.raises(ArgumentError, match=r"missing required field\(s\) 'sm_count'"):
        GpuTarget.from_dict(data)
    with pytest.raises(ArgumentError, match=r"unknown field\(s\) 'sms'"):
        GpuTarget.from_dict(_h100_dict(sms=132))
    with pytest.raises(ArgumentError, match="mapping"):
        GpuTarget.from_dict([("name", "x")])  # type: ignore[arg-type]


def test_defaults_may_be_left_out():
    data = _h100_dict()
    for name in ("warp_size", "sector_bytes", "cache_line_bytes", "max_threads_per_block"):
        del data[name]
    assert GpuTarget.from_dict(data) == H100


def test_replace_validates():
    with pytest.raises(ArgumentError, match="'sm_count'"):
        dataclasses.replace(H100, sm_count=-4)


def test_a100_and_l40s_numbers():
    # A100 SXM4 80GB datasheet; CUDA guide, compute capability 8.0
    assert A100.compute_capability == (8, 0) and A100.sm_arch == "sm_80"
    assert (A100.sm_count, A100.max_threads_per_sm, A100.max_blocks_per_sm) == (108, 2048, 32)
    assert (A100.shared_memory_per_sm, A100.shared_memory_per_block_optin) == (164 * 1024, 163 * 1024)
    assert A100.dram_bandwidth == 2039e9 and A100.l2_cache_bytes == 40 * 2**20
    # 108 SMs * 64 FP32 lanes * 2 * 1.41 GHz = 19.49 TFLOP/s, the datasheet's 19.5
    assert A100.sm_count * 64 * 2 * A100.clock_hz == pytest.approx(A100.peak_fp32_flops, rel=0.01)
    # L40S datasheet; CUDA guide, compute capability 8.9: 1536 threads and 24 blocks per SM
    assert L40S.compute_capability == (8, 9) and L40S.sm_arch == "sm_89"
    assert (L40S.sm_count, L40S.max_threads_per_sm, L40S.max_blocks_per_sm) == (142, 1536, 24)
    assert (L40S.shared_memory_per_sm, L40S.shared_memory_per_block_optin) == (100 * 1024, 99 * 1024)
    assert L40S.dram_bandwidth == 864e9 and L40S.memory_bytes == 48 * 10**9
    # 142 SMs * 128 lanes * 2 * 2.52 GHz = 91.6 TFLOP/s
    assert L40S.sm_count * 128 * 2 * L40S.clock_hz == pytest.approx(L40S.peak_fp32_flops, rel=0.01)


def _toml(tmp_path, text: str, name: str = "gpu.toml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_a_target_file_starts_from_a_base_and_changes_what_differs(tmp_path):
    path = _toml(tmp_path, 'base = "h100"\nname = "H100 PCIe"\nsm_count = 114\ndram_bandwidth = 2.0e12\n')
    target = get_target(path)
    assert target == dataclasses.replace(H100, name="H100 PCIe", sm_count=114, dram_bandwidth=2.0e12)
    assert GpuTarget.from_toml(path) == target
    full = _toml(
        tmp_path, "\n".join(f"{k} = {_toml_value(v)}" for k, v in L40S.to_dict().items()), "l40s.toml"
    )
    assert get_target(full) == L40S  # every field written out


def _toml_value(value) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, list):
        return "[" + ", ".join(map(str, value)) + "]"
    return repr(value)


@pytest.mark.parametrize(
    "text, message",
    [
        ('base = "h100"\nsm_count = \n', r"gpu\.toml.*line 2, column 12"),  # TOML syntax
        ('base = "h100"\nsm_cont = 114\n', r"gpu\.toml.*unknown field\(s\) 'sm_cont'"),
        ('base = "h100"\nsm_count = -4\n', r"gpu\.toml.*'sm_count' must be a positive integer"),
        ('base = "h100"\nsm_count = "114"\n', r"gpu\.toml.*'sm_count' must be a positive integer"),
        ('base = "v100"\n', r"gpu\.toml.*'base' must be the name of a built-in target .*got 'v100'"),
        ("base = 3\n", r"gpu\.toml.*'base' must be the name of a built-in target .*got 3"),
        ('name = "X"\nsm_count = 4\n', r"gpu\.toml.*missing required field\(s\) 'compute_capability'"),
    ],
)
def test_a_bad_target_file_names_the_file_and_the_field(tmp_path, text, message):
    with pytest.raises(ArgumentError, match=message):
        get_target(_toml(tmp_path, text))


def test_a_missing_or_binary_target_file_is_a_clear_error(tmp_path):
    with pytest.raises(ArgumentError, match=r"cannot read GPU target file .*nothing\.toml"):
        get_target(str(tmp_path / "nothing.toml"))
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ArgumentError, match=r"binary\.toml.*not UTF-8"):
        get_target(binary)


@pytest.mark.parametrize(
    "text, message",
    [
        (
            'base = "gpu.toml"\n',
            r"'base' must be the name of a built-in target \(h100, .*\), got 'gpu\.toml'",
        ),
        ('base = "h100"\nsm_count = 99999999999999999999\n', r"gpu\.toml"),  # beyond TOML's 64-bit ints
        ('base = "h100"\nsm_count = 9223372036854775807\n', r"'sm_count' must be at most 1099511627776"),
        ('base = "h100"\ndram_bandwidth = 1e-12\n', r"'dram_bandwidth' must be between 1e\+09 and 1e\+16"),
        ('base = "h100"\npeak_fp32_flops = 1e300\n', r"'peak_fp32_flops' must be between"),
        (
            'base = "h100"\ncompute_capability = [9, 10]\n',
            r"'compute_capability' minor version must be 0\.\.9",
        ),
        ('base = "h100"\nregister_allocation_unit = 1000000\n', r"'register_allocation_unit' cannot exceed"),
    ],
)
def test_a_target_file_beyond_any_gpu_or_naming_a_file_as_base_is_refused(tmp_path, text, message):
    with pytest.raises(ArgumentError, match=message):
        get_target(_toml(tmp_path, text))


def test_a_target_file_from_a_base_without_a_name_is_not_called_by_the_base_name(tmp_path):
    target = get_target(_toml(tmp_path, 'base = "h100"\nmax_grid_dim_x = 2\nsm_count = 100\n'))
    assert target.name == "NVIDIA H100 SXM5, modified (max_grid_dim_x, sm_count)"


def test_a_target_file_with_a_byte_order_mark_is_read(tmp_path):
    path = tmp_path / "bom.toml"
    path.write_bytes(b"\xef\xbb\xbf" + b'base = "a100"\nname = "BOM"\n')
    assert get_target(path) == dataclasses.replace(A100, name="BOM")
