"""A real Jupyter kernel (ipykernel on this venv's interpreter) driven by a blocking jupyter_client."""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager

KERNEL_NAME = "console-bridge-test"
#: Seconds any one cell of these tests may take (the first %%console cell starts the worker).
CELL_TIMEOUT = 60.0


@dataclass
class Execution:
    """Everything the kernel published for one execute request, with arrival times."""

    msg_id: str
    messages: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    reply: dict[str, Any] | None = None
    reply_at: float | None = None

    def of_type(self, msg_type: str) -> list[dict[str, Any]]:
        return [msg["content"] for _, msg in self.messages if msg["msg_type"] == msg_type]

    def stream(self, name: str = "stdout") -> str:
        return "".join(c["text"] for c in self.of_type("stream") if c["name"] == name)

    @property
    def stdout(self) -> str:
        return self.stream("stdout")

    @property
    def stderr(self) -> str:
        return self.stream("stderr")

    @property
    def status(self) -> str:
        assert self.reply is not None
        return str(self.reply["content"]["status"])

    @property
    def error(self) -> dict[str, Any] | None:
        errors = self.of_type("error")
        return errors[0] if errors else None

    def expect_ok(self) -> Execution:
        assert self.status == "ok", f"cell failed: {self.error}\nstdout: {self.stdout}\nstderr: {self.stderr}"
        return self


class Kernel:
    """One kernel: ``run(code)`` executes a cell and returns what it published."""

    def __init__(self, km: KernelManager, kc: BlockingKernelClient, root: Path) -> None:
        self.km = km
        self.kc = kc
        self.root = root
        self.workspace = root / "workspace"
        self.recordings = root / "recordings"
        self.tmp = root / "tmp"

    @property
    def console_options(self) -> str:
        return f"--workspace {self.workspace} --recordings-dir {self.recordings}"

    def submit(self, code: str) -> Execution:
        return Execution(self.kc.execute(code, store_history=False))

    def read_until(self, run: Execution, predicate: Any, timeout: float = CELL_TIMEOUT) -> dict[str, Any]:
        """Read iopub messages of ``run`` until one satisfies ``predicate``; return it."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no matching message within {timeout:g}s; got {run.messages}")
            msg = self.kc.get_iopub_msg(timeout=remaining)
            if msg["parent_header"].get("msg_id") != run.msg_id:
                continue
            run.messages.append((time.monotonic(), msg))
            if predicate(msg):
                return msg

    def wait_for_stdout(self, run: Execution, text: str, timeout: float = CELL_TIMEOUT) -> float:
        """Wait until ``text`` has been streamed to stdout by ``run``; return when it arrived."""
        self.read_until(run, lambda msg: text in run.stdout, timeout)
        return run.messages[-1][0]

    def finish(self, run: Execution, timeout: float = CELL_TIMEOUT) -> Execution:
        self.read_until(
            run,
            lambda msg: msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle",
            timeout,
        )
        deadline = time.monotonic() + timeout
        while run.reply is None:
            reply = self.kc.get_shell_msg(timeout=max(0.1, deadline - time.monotonic()))
            if reply["parent_header"].get("msg_id") == run.msg_id:
                run.reply, run.reply_at = reply, time.monotonic()
        return run

    def run(self, code: str, timeout: float = CELL_TIMEOUT) -> Execution:
        return self.finish(self.submit(code), timeout)

    def pid(self) -> int:
        return int(self.run("import os; print(os.getpid())").expect_ok().stdout.strip())

    def shutdown(self) -> None:
        self.kc.stop_channels()
        if self.km.has_kernel:
            self.km.shutdown_kernel(now=False)


def _kernelspec(root: Path) -> KernelSpecManager:
    """A kernelspec in a temporary folder that runs ipykernel on this interpreter (the venv's)."""
    spec_dir = root / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "console-bridge tests",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")
    return KernelSpecManager(kernel_dirs=[str(root / "kernels")], ensure_native_kernel=False)


def start_kernel(root: Path) -> Kernel:
    """Start a kernel whose IPython, Jupyter and temp folders all live under ``root``."""
    for sub in ("workspace", "recordings", "tmp", "ipython", "jupyter"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.update(
        {
            "IPYTHONDIR": str(root / "ipython"),
            "JUPYTER_CONFIG_DIR": str(root / "jupyter"),
            "JUPYTER_DATA_DIR": str(root / "jupyter"),
            "JUPYTER_RUNTIME_DIR": str(root / "jupyter"),
            "JUPYTER_PLATFORM_DIRS": "1",
            "TMPDIR": str(root / "tmp"),
            "CONSOLE_BRIDGE_STATE_DIR": str(root / "state"),
            "PYDEVD_DISABLE_FILE_VALIDATION": "1",
        }
    )
    km = KernelManager(
        kernel_name=KERNEL_NAME,
        kernel_spec_manager=_kernelspec(root),
        connection_file=str(root / "jupyter" / "kernel-connection.json"),
    )
    km.start_kernel(env=env, cwd=str(root / "workspace"))
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=CELL_TIMEOUT)
    except BaseException:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
        raise
    return Kernel(km, kc, root)
