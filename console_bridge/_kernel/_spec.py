"""Kernelspecs of the sandboxed kernel: install, list, remove (jupyter_client's ``KernelSpecManager``),
so JupyterLab, Notebook, VS Code, nbclient and papermill start it by name."""

from __future__ import annotations

import json
import shlex
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from console_bridge import InvalidArgument
from console_bridge._jupyter._options import OptionsError, parse_cell_line

__all__ = ["DEFAULT_NAME", "InstalledKernel", "KernelSpecs"]

DEFAULT_NAME = "console-bridge"
DEFAULT_DISPLAY_NAME = "Python (console-bridge sandbox)"
#: written in each spec's metadata: ``list`` shows only these
_MARK = "console_bridge"


@dataclass(frozen=True, slots=True)
class InstalledKernel:
    """One installed kernelspec of the sandboxed kernel."""

    name: str
    display_name: str
    path: Path
    options: tuple[str, ...]


def _manager() -> Any:
    from jupyter_client.kernelspec import KernelSpecManager

    return KernelSpecManager()


def spec_document(display_name: str, options: tuple[str, ...], python: str | None = None) -> dict[str, Any]:
    """The ``kernel.json`` of a sandboxed kernel whose cells run with the ``%%console`` ``options``."""
    try:
        parse_cell_line(" ".join(shlex.quote(option) for option in options))
    except OptionsError as exc:
        raise InvalidArgument(f"kernel options {' '.join(options)!r}: {exc}") from None
    return {
        "argv": [python or sys.executable, "-m", "console_bridge._kernel", "-f", "{connection_file}", "--", *options],
        "display_name": display_name,
        "language": "python",
        "interrupt_mode": "signal",
        "metadata": {_MARK: {"options": list(options), "debugger": False}},
    }


class KernelSpecs:
    """Install, list and remove the sandboxed kernel's specs. Example::

    KernelSpecs().install(user=True, options=("--profile", "workspace"))
    """

    def install(
        self,
        *,
        name: str = DEFAULT_NAME,
        display_name: str = DEFAULT_DISPLAY_NAME,
        options: tuple[str, ...] = (),
        user: bool = False,
        prefix: str | None = None,
    ) -> Path:
        """Install a spec (``user``: the user's Jupyter folder; ``prefix``: ``PREFIX/share/jupyter``;
        neither: the system's); returns its folder."""
        if not name or not all(ch.isalnum() or ch in "-._" for ch in name):
            raise InvalidArgument(f"kernel name {name!r} must be letters, digits, '-', '.' or '_'")
        document = spec_document(display_name, options)
        with tempfile.TemporaryDirectory(prefix="console-bridge-kernel-") as folder:
            (Path(folder) / "kernel.json").write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
            try:
                target = _manager().install_kernel_spec(folder, name, user=user, prefix=prefix)
            except OSError as exc:
                raise InvalidArgument(
                    f"cannot install the kernel spec {name!r} there ({exc}); use --user (your Jupyter folder) "
                    "or --sys-prefix (this venv's)"
                ) from None
        return Path(target)

    def list(self) -> list[InstalledKernel]:
        """The sandboxed kernels installed where Jupyter looks (other kernels are not listed)."""
        found = []
        for name, entry in sorted(_manager().get_all_specs().items()):
            spec = entry.get("spec") or {}
            mark = (spec.get("metadata") or {}).get(_MARK)
            if isinstance(mark, dict):
                options = tuple(str(option) for option in mark.get("options") or ())
                found.append(
                    InstalledKernel(name, str(spec.get("display_name", name)), Path(entry["resource_dir"]), options)
                )
        return found

    def remove(self, name: str) -> Path:
        """Remove the sandboxed kernel ``name`` (refused for a kernel that is not one of ours)."""
        ours = {kernel.name: kernel for kernel in self.list()}
        if name not in ours:
            known = ", ".join(sorted(ours)) or "none is installed"
            raise InvalidArgument(
                f"no console-bridge kernel is named {name!r} ({known}); see `console-bridge kernel list`"
            )
        try:
            return Path(_manager().remove_kernel_spec(name))
        except OSError as exc:
            raise InvalidArgument(f"cannot remove the kernel spec {name!r}: {exc}") from None
