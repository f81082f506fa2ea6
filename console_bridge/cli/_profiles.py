"""``console-bridge profiles``: the shipped sandbox profiles and the sandbox each one expects."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from packaging.version import Version

from console_bridge._errors import LaunchRefused
from console_bridge._vetting._profiles import Profile, available_profiles, load_profile, translate
from console_bridge._vetting._sandbox import SandboxPolicy
from console_bridge._vetting._version import QUALIFIED_VERSIONS
from console_bridge.cli._common import error_text, table

__all__ = ["profiles_group"]


def expected_sandbox(profile: Profile) -> SandboxPolicy:
    """The sandbox the server must advertise for ``profile`` (before any writable roots)."""
    return SandboxPolicy(sandboxed=True, network="restricted", writable=frozenset(profile.expects_writable))


def _load(name: str) -> Profile:
    try:
        return load_profile(name)
    except LaunchRefused as exc:
        raise click.BadParameter(error_text(exc), param_hint="NAME") from None


def _launch_args(profile: Profile, workspace: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for text in QUALIFIED_VERSIONS:
        try:
            args, expected = translate(profile, Version(text), workspace, [])
        except LaunchRefused as exc:
            out[text] = {"supported": False, "reason": error_text(exc)}
        else:
            out[text] = {"supported": True, "args": args, "advertises": expected.describe()}
    return out


PROFILES_HELP = """List the sandbox profiles (the same as `profiles list`).

\b
A profile declares the server settings it needs and the sandbox mcp-console
must then advertise; `run` refuses to run code unless the advertised sandbox is
exactly that. Pass a profile's name, or a profile file, to `run --profile`.

\b
Examples:
  console-bridge profiles
  console-bridge profiles show workspace
  console-bridge profiles list --json
"""


@click.group("profiles", help=PROFILES_HELP, invoke_without_command=True)
@click.option("--json", "json_output", is_flag=True, help="Print JSON.")
@click.pass_context
def profiles_group(ctx: click.Context, json_output: bool) -> None:
    if ctx.invoked_subcommand is None:
        ctx.invoke(list_profiles, json_output=json_output)


@profiles_group.command(
    "list",
    help="""List the shipped sandbox profiles and the sandbox each expects.

\b
Examples:
  console-bridge profiles list
  console-bridge profiles list --json
""",
)
@click.option("--json", "json_output", is_flag=True, help="Print JSON.")
def list_profiles(json_output: bool) -> None:
    profiles = [_load(name) for name in available_profiles()]
    if json_output:
        document = [
            {**profile.as_dict(), "expected_sandbox": expected_sandbox(profile).describe()} for profile in profiles
        ]
        click.echo(json.dumps(document, indent=2))
        return
    rows = [[p.name, expected_sandbox(p).describe(), p.summary] for p in profiles]
    click.echo(table(["name", "expected sandbox", "summary"], rows))


@profiles_group.command(
    "show",
    help="""Show one profile: its settings, the sandbox it expects, the launch arguments.

NAME is a shipped profile's name or a path to a profile file (which is
validated: profiles may only narrow the sandbox). The launch arguments are shown
for each qualified mcp-console version, with the current folder as workspace.

\b
Examples:
  console-bridge profiles show read-only
  console-bridge profiles show ./my-profile.yaml --json
""",
)
@click.argument("name")
@click.option("--json", "json_output", is_flag=True, help="Print JSON.")
def show_profile(name: str, json_output: bool) -> None:
    profile = _load(name)
    workspace = Path.cwd()
    launch = _launch_args(profile, workspace)
    expected = expected_sandbox(profile)
    if json_output:
        document = {
            **profile.as_dict(),
            "expected_sandbox": expected.describe(),
            "workspace": str(workspace),
            "launch": launch,
        }
        click.echo(json.dumps(document, indent=2))
        return
    data = profile.as_dict()
    lines = [
        f"name:     {profile.name}",
        f"summary:  {profile.summary}",
        f"source:   {profile.source}",
        f"expects:  {expected.describe()}",
        "          (plus every --writable-root; anything else is refused before code runs)",
        "server settings:",
    ]
    lines += [f"  {key}: {json.dumps(value)}" for key, value in data["server"].items()]
    for version, info in launch.items():
        lines.append(f"launch arguments for mcp-console {version} (workspace {workspace}):")
        lines.append("  " + (" ".join(info["args"]) if info["supported"] else f"not supported: {info['reason']}"))
    click.echo("\n".join(lines))
