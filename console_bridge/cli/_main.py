"""The ``console-bridge`` group and its entry point."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click

from console_bridge._vetting._version import QUALIFIED_VERSIONS
from console_bridge.cli._doctor import doctor_command
from console_bridge.cli._kernel import kernel_group
from console_bridge.cli._profiles import profiles_group
from console_bridge.cli._recordings import recordings_group
from console_bridge.cli._run import run_command
from console_bridge.cli._serve import serve_command
from console_bridge.cli._sessions import kill_command, ps_command, top_command

__all__ = ["cli", "main"]

CLI_HELP = """Run untrusted Python, R and SQL in a verified MCP Console sandbox.

\b
Exit status: 0 ok, 1 the code raised or returned an error, 2 usage error,
3 launch refused or verification failed, 4 timeout.

\b
Examples:
  console-bridge run analysis.py
  console-bridge run --artifacts artifacts --timeout 600 analysis.py
  console-bridge doctor
  console-bridge profiles show read-only
  console-bridge recordings prune --older-than 7d --dry-run
  console-bridge ps
  console-bridge kill 20261130T061501-1a2b3c4d
  console-bridge serve
  console-bridge kernel install --user

Run `console-bridge COMMAND --help` for each command's options and examples.
"""


def _version_message() -> str:
    from console_bridge import __version__

    return f"console-bridge {__version__} (qualified mcp-console: {', '.join(QUALIFIED_VERSIONS)})"


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(_version_message())
        ctx.exit(0)


@click.group("console-bridge", help=CLI_HELP, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Print the version (and the qualified mcp-console versions) and exit.",
)
def cli() -> None:
    pass


cli.add_command(run_command)
cli.add_command(doctor_command)
cli.add_command(profiles_group)
cli.add_command(recordings_group)
cli.add_command(ps_command)
cli.add_command(kill_command)
cli.add_command(top_command)
cli.add_command(serve_command)
cli.add_command(kernel_group)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``console-bridge`` script; exits with the command's status."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    cli.main(args=list(argv) if argv is not None else None, prog_name="console-bridge")
