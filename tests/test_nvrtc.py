"""NVRTC compile check: PTX for sm_90 without a GPU, and errors that point at the source.

These tests need cuda-bindings and nvidia-cuda-nvrtc (the ``test`` extra installs both) but
no GPU or driver. They do not skip when NVRTC is missing: the check is part of CI, so a
broken install must fail here rather than pass silently.
"""

from __future__ import annotations

import sys
import types

import pytest

from polymap.errors import ArgumentError, CudaCompileError, PolymapError
from polymap.runtime import nvrtc as nvrtc_runtime
from polymap.runtime.nvrtc import compile_ptx, nvrtc_available, nvrtc_version

VALID_KERNEL = """\
extern "C" __global__ void softplus_tile(const float* __restrict__ x, float* __restrict__ y, int n)
{
    __shared__ float tile[128];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    if (i < n) {
        y[i] = logf(1.0f + expf(tile[threadIdx.x]));
    }
}
"""

# Line 5 uses an identifier that is declared nowhere.
UNDEFINED_IDENTIFIER_KERNEL = """\
extern "C" __global__ void scale(float* y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = y[i] * undefined_scale;
    }
}
"""


def test_nvrtc_is_available_and_reports_its_version():
    assert nvrtc_available()
    major, minor = nvrtc_version()
    assert isinstance(major, int) and isinstance(minor, int)
    assert major >= 12


def test_valid_kernel_compiles_to_ptx_for_sm_90():
    ptx = compile_ptx(VALID_KERNEL)
    assert ".target sm_90" in ptx
    assert ".entry softplus_tile(" in ptx
    # The shared tile survives to PTX, so the kernel body was really compiled.
    assert ".shared" in ptx
    assert not ptx.endswith("\0")


def test_arch_selects_the_ptx_target():
    ptx = compile_ptx(VALID_KERNEL, arch="sm_80")
    assert ".target sm_80" in ptx
    assert ".target sm_90" not in ptx


def test_an_architecture_nvrtc_does_not_compile_for_names_those_it_does():
    # sm_70 (Volta) left NVRTC 13; a target file may still say compute_capability = [7, 0]
    with pytest.raises(
        CudaCompileError, match=r"for sm_70: .*this NVRTC compiles for sm_75, .*sm_90"
    ) as info:
        compile_ptx(VALID_KERNEL, arch="sm_70")
    assert "compute_capability must be one of these" in str(info.value)


def test_malformed_arch_is_an_argument_error():
    with pytest.raises(ArgumentError, match="sm_90"):
        compile_ptx(VALID_KERNEL, arch="hopper")


def test_extra_options_are_passed_to_nvrtc():
    # -lineinfo makes NVRTC emit .loc directives; without it the PTX has none.
    assert ".loc" not in compile_ptx(VALID_KERNEL)
    assert ".loc" in compile_ptx(VALID_KERNEL, options=("-lineinfo",))


def test_undefined_identifier_names_the_file_line_and_source_line():
    with pytest.raises(CudaCompileError) as info:
        compile_ptx(UNDEFINED_IDENTIFIER_KERNEL, name="scale_kernel.cu")
    err = info.value
    message = str(err)
    assert message.startswith("NVRTC could not compile scale_kernel.cu for sm_90: ")
    assert 'identifier "undefined_scale" is undefined' in message
    assert "at scale_kernel.cu:5: y[i] = y[i] * undefined_scale;" in message
    assert err.line == "        y[i] = y[i] * undefined_scale;"
    assert "error" in err.log
    assert "scale_kernel.cu(5)" in err.log
    assert isinstance(err, PolymapError)


def test_compile_error_quotes_the_first_error_not_an_earlier_warning():
    # Line 3 draws a truncation warning, logged before the errors on lines 4 and 5.
    source = """\
extern "C" __global__ void k(float* y)
{
    char error_code = 1000;
    y[0] = missing_a + error_code;
    y[1] = missing_b;
}
"""
    with pytest.raises(CudaCompileError) as info:
        compile_ptx(source)
    log = info.value.log
    assert log.index("kernel.cu(3): warning") < log.index("kernel.cu(4): error")
    message = str(info.value)
    first_line = message.splitlines()[0]
    assert 'identifier "missing_a" is undefined' in first_line
    assert "at kernel.cu:4: y[0] = missing_a + error_code;" in message
    assert "missing_b" not in message
    assert "kernel.cu(5): error" in log


def test_missing_include_is_a_located_compile_error():
    source = '#include "no_such_header.cuh"\nextern "C" __global__ void k() {}\n'
    with pytest.raises(CudaCompileError) as info:
        compile_ptx(source)
    message = str(info.value)
    assert "no_such_header.cuh" in message.splitlines()[0]
    assert 'at kernel.cu:1: #include "no_such_header.cuh"' in message
    assert info.value.line == '#include "no_such_header.cuh"'


def test_error_in_another_file_does_not_quote_our_source():
    # The #line directive makes NVRTC blame other.cuh line 1 (the line after it), as it
    # would blame an included header; line 1 of *our* source must not be quoted.
    source = '#line 1 "other.cuh"\nextern "C" __global__ void k(float* y) { y[0] = nope; }\n'
    with pytest.raises(CudaCompileError) as info:
        compile_ptx(source)
    message = str(info.value)
    assert "other.cuh(1): error" in message
    assert "\n    at " not in message
    assert info.value.line is None


def test_invalid_option_is_a_compile_error_with_nvrtc_words():
    with pytest.raises(CudaCompileError) as info:
        compile_ptx(VALID_KERNEL, options=("--no-such-nvrtc-flag",))
    message = str(info.value)
    assert message.startswith("NVRTC could not compile kernel.cu for sm_90")
    assert "NVRTC_ERROR_INVALID_OPTION" in message
    assert "--no-such-nvrtc-flag" in message
    assert info.value.line is None


def test_program_is_destroyed_on_success_and_failure(monkeypatch):
    module = nvrtc_runtime._load()
    created, destroyed = [], []
    real_create, real_destroy = module.nvrtcCreateProgram, module.nvrtcDestroyProgram

    def create(*args):
        result = real_create(*args)
        created.append(result[1])
        return result

    def destroy(program):
        destroyed.append(program)
        return real_destroy(program)

    monkeypatch.setattr(module, "nvrtcCreateProgram", create)
    monkeypatch.setattr(module, "nvrtcDestroyProgram", destroy)
    compile_ptx(VALID_KERNEL)
    with pytest.raises(CudaCompileError):
        compile_ptx(UNDEFINED_IDENTIFIER_KERNEL)
    with pytest.raises(CudaCompileError):
        compile_ptx(VALID_KERNEL, options=("--no-such-nvrtc-flag",))
    assert len(created) == 3
    assert destroyed == created


def _forget_loaded_module(monkeypatch):
    # The runtime keeps the imported bindings module; drop it so the next call imports again.
    monkeypatch.setattr(nvrtc_runtime, "_nvrtc_module", None)


def test_missing_cuda_bindings_says_what_to_install(monkeypatch):
    _forget_loaded_module(monkeypatch)
    # None in sys.modules makes `import cuda.bindings...` raise ImportError, as when the
    # package is not installed.
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)
    monkeypatch.setitem(sys.modules, "cuda.bindings.nvrtc", None)

    with pytest.raises(CudaCompileError) as info:
        compile_ptx(VALID_KERNEL)
    assert "pip install cuda-bindings nvidia-cuda-nvrtc" in str(info.value)
    assert isinstance(info.value.__cause__, ImportError)
    assert not nvrtc_available()
    with pytest.raises(CudaCompileError, match="pip install"):
        nvrtc_version()


def test_missing_nvrtc_library_says_what_to_install(monkeypatch):
    _forget_loaded_module(monkeypatch)

    # cuda-bindings imports fine but cannot dlopen libnvrtc: its first call raises a
    # RuntimeError (cuda.pathfinder's DynamicLibNotFoundError).
    def version():
        raise RuntimeError('Failure finding "libnvrtc.so.13"')

    fake = types.ModuleType("cuda.bindings.nvrtc")
    fake.nvrtcVersion = version
    monkeypatch.setitem(sys.modules, "cuda.bindings.nvrtc", fake)

    with pytest.raises(CudaCompileError) as info:
        compile_ptx(VALID_KERNEL)
    assert "pip install cuda-bindings nvidia-cuda-nvrtc" in str(info.value)
    assert "libnvrtc" in str(info.value)
    assert not nvrtc_available()


def test_a_failed_load_is_not_remembered(monkeypatch):
    _forget_loaded_module(monkeypatch)
    with monkeypatch.context() as patch:
        patch.setitem(sys.modules, "cuda.bindings.nvrtc", None)
        assert not nvrtc_available()
    # Once the bindings import again (e.g. installed mid-session), NVRTC works.
    assert nvrtc_available()
    assert ".entry softplus_tile(" in compile_ptx(VALID_KERNEL)


def test_the_assemblers_error_is_the_line_shown_not_a_warning_before_it():
    # (from a review) a kernel over the static shared-memory limit: NVRTC's log opens with a
    # warning, and the reason is ptxas's line
    log = (
        'warning #177-D: variable "ty" was declared but never referenced\n'
        "ptxas error   : Entry function 'k' uses too much shared data (0xc084 bytes, 0xc000 max)\n"
    )
    assert nvrtc_runtime._first_error_line(log).startswith("ptxas error   : Entry function 'k' uses too much")
