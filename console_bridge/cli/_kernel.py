"""``console-bridge kernel install|list|remove``: the sandboxed Jupyter kernel's specs."""

from __future__ import annotations

import click

from console_bridge._errors import BridgeError
from console_bridge._kernel._spec import DEFAULT_DISPLAY_NAME, DEFAULT_NAME, KernelSpecs
from console_bridge.cli._common import error_text

__all__ = ["kernel_group"]

KERNEL_HELP = """The sandboxed Jupyter kernel: every cell runs in one verified console-bridge session.

\b
Cells are Python; a cell that starts with %%sql or %%R runs in that language in the same
session. The session's workspace is the notebook's folder (read-only unless --profile
workspace). JupyterLab, Notebook, VS Code, nbclient and papermill start it by name.

\b
Examples:
  console-bridge kernel install --user
  console-bridge kernel install --user --name cb-write --profile workspace --languages python,sql,r
  jupyter kernelspec list
  papermill -k console-bridge in.ipynb out.ipynb
  console-bridge kernel list
  console-bridge kernel remove cb-write
"""


@click.group("kernel", help=KERNEL_HELP)
def kernel_group() -> None:
    pass


# (each of these is passed to the session as the %%console option of the same name)
_SESSION_OPTIONS = ("profile", "python", "languages", "memory", "processes", "cpu", "tmpdir_limit")


@kernel_group.command("install")
@click.option("--user", "where", flag_value="user", default=True, help="Your Jupyter folder (the default).")
@click.option("--sys-prefix", "where", flag_value="sys-prefix", help="This Python environment's Jupyter folder.")
@click.option("--prefix", type=click.Path(file_okay=False), help="PREFIX/share/jupyter/kernels.")
@click.option("--name", default=DEFAULT_NAME, show_default=True, help="The kernel's name (what -k / kernel_name take).")
@click.option("--display-name", default=DEFAULT_DISPLAY_NAME, show_default=True, help="What notebooks show.")
@click.option("--profile", help="Sandbox profile of the sessions (read-only by default, or workspace, or a file).")
@click.option("--python", help="The venv whose Python runs the cells (default: this one).")
@click.option("--languages", help="The session's languages, e.g. python,sql,r (default: python,sql).")
@click.option("--memory", help="Memory limit of each session's tree (e.g. 2GiB).")
@click.option("--processes", help="Process limit of each session.")
@click.option("--cpu", help="CPU limit of each session, in cores.")
@click.option("--tmpdir-limit", help="Size limit of each session's TMPDIR.")
@click.option("--read-root", "read_roots", multiple=True, help="A folder cells may read beyond the profile's.")
def install_command(
    where: str, prefix: str | None, name: str, display_name: str, read_roots: tuple[str, ...], **session: str | None
) -> None:
    """Install the kernel's spec, so Jupyter tools find it by name.

    \b
    Examples:
      console-bridge kernel install --user
      console-bridge kernel install --sys-prefix --name cb-write --profile workspace
    """
    options: list[str] = []
    for key in _SESSION_OPTIONS:
        value = session.get(key)
        if value is not None:
            options += [f"--{key.replace('_', '-')}", value]
    for root in read_roots:
        options += ["--read-root", root]
    import sys

    try:
        if prefix is None and where == "sys-prefix":
            prefix = sys.prefix
        path = KernelSpecs().install(
            name=name, display_name=display_name, options=tuple(options), user=prefix is None, prefix=prefix
        )
    except BridgeError as exc:
        raise click.ClickException(error_text(exc)) from None
    click.echo(f"installed the kernel {name!r} ({display_name}) in {path}")


@kernel_group.command("list")
def list_command() -> None:
    """The sandboxed kernels Jupyter finds (name, folder, session options).

    \b
    Examples:
      console-bridge kernel list
    """
    kernels = KernelSpecs().list()
    if not kernels:
        click.echo("no console-bridge kernel is installed; `console-bridge kernel install --user` installs one")
        return
    for kernel in kernels:
        options = " ".join(kernel.options) or "(defaults)"
        click.echo(f"{kernel.name}\t{kernel.path}\t{options}")


@kernel_group.command("remove")
@click.argument("name")
def remove_command(name: str) -> None:
    """Remove the sandboxed kernel NAME.

    \b
    Examples:
      console-bridge kernel remove cb-write
    """
    try:
        path = KernelSpecs().remove(name)
    except BridgeError as exc:
        raise click.ClickException(error_text(exc)) from None
    click.echo(f"removed the kernel {name!r} ({path})")
