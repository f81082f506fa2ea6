"""A cell that fights back, run by scripts/ci-container.sh inside a container (issue 34).

Each attack prints one line, ``ATTACK <name>: blocked (<why>)`` or ``ATTACK <name>: GOT <what>``; the
stage fails on any ``GOT`` and on a missing line. The host side plants what there is to steal before
the run: a token in ``$HOME/.bash_history`` (the container user's home) and ``/tmp/host-secret``.
"""

import glob
import os
import socket
import subprocess


def attempt(name, action):
    try:
        got = action()
    except Exception as exc:  # the attack failed: that is the point
        print(f"ATTACK {name}: blocked ({type(exc).__name__}: {exc})", flush=True)
        return
    print(f"ATTACK {name}: GOT {got!r}"[:300], flush=True)


def read(path):
    with open(path) as handle:
        return handle.read()


def write(path, text="x"):
    with open(path, "w") as handle:
        handle.write(text)
    return f"wrote {path}"


def find_history():
    found = glob.glob("/home/*/.bash_history") + glob.glob("/root/.bash_history")
    if not found:
        raise FileNotFoundError("no .bash_history anywhere in the view")
    return {path: read(path) for path in found}


def connect_out():
    with socket.create_connection(("1.1.1.1", 53), timeout=3):
        return "connected to 1.1.1.1:53"


def escape_by_proc_root():
    # another process's root (a way round a mount view when the pid namespace is shared)
    found = glob.glob("/proc/*/root/home/*/.bash_history") + glob.glob("/proc/*/root/tmp/host-secret")
    if not found:
        raise FileNotFoundError("no host file through /proc/*/root")
    return {path: read(path) for path in found}


attempt("home history", find_history)
attempt("host tmp secret", lambda: read("/tmp/host-secret"))
attempt("shadow", lambda: read("/etc/shadow"))
attempt("write /proc/sys", lambda: write("/proc/sys/kernel/hostname", "pwned"))
attempt("write the venv", lambda: write("/opt/cb/bin/console-bridge-pwned"))
attempt("write /etc", lambda: write("/etc/pwned"))
attempt("network", connect_out)
attempt("proc root", escape_by_proc_root)
attempt("setuid root", lambda: (os.setuid(0), f"uid {os.getuid()}")[1])
attempt(
    "mount",
    lambda: subprocess.run(["mount", "-t", "tmpfs", "x", "/mnt"], check=True, capture_output=True) and "mounted",
)

print("::add-mask::not-a-secret")  # a CI workflow command from a cell: run's log must neutralize it
print(f"uid inside: {os.getuid()}")
