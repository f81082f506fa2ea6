"""The sandboxed Jupyter kernel (``console-bridge kernel install``): ipykernel's kernel, every cell run
in one verified console-bridge session (``_kernel``), and its kernelspecs (``_spec``)."""

from __future__ import annotations

from console_bridge._kernel._spec import DEFAULT_NAME, KernelSpecs

__all__ = ["DEFAULT_NAME", "KernelSpecs"]
