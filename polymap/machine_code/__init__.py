"""The machine code polymap's kernels become: registers, local memory, occupancy and the hot
loop's instruction mix, read from NVRTC's cubin with cuobjdump (no GPU needed)."""

from polymap.machine_code.report import KernelMachineCode, MachineCodeReport, inspect_kernel

__all__ = ["KernelMachineCode", "MachineCodeReport", "inspect_kernel"]
