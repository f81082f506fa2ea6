"""``console-bridge recordings``: list, show, prune, delete and export session recordings."""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from console_bridge._cells._recordings import Recording, Recordings, default_recordings_root
from console_bridge._errors import BridgeError
from console_bridge._hostfs import read_file, walk_tree
from console_bridge.cli._common import ByteSize, Duration, error_text, fail, human_size, iso, table
from console_bridge.cli._output import CellOutput

__all__ = ["recordings_group"]

F = TypeVar("F", bound=Callable[..., Any])
_TRANSCRIPT_CAP = 256 * 1024 * 1024  # bytes of transcript `show --transcript` prints at most


def _state(rec: Recording) -> str:
    if rec.live:
        return "live"
    return "finalized" if rec.finalized else "unfinished"


def _as_dict(rec: Recording, *, detail: bool = False) -> dict[str, Any]:
    data: dict[str, Any] = {
        "run_id": rec.run_id,
        "path": str(rec.path),
        "started_at": iso(rec.started_at),
        "size_bytes": rec.size_bytes,
        "finalized": rec.finalized,
        "live": rec.live,
        "layout": rec.layout,
        "workspace": rec.workspace,
        "profile": rec.profile,
        "owner": rec.owner,
        "user": rec.info.get("user"),
    }
    if detail:
        transcript = rec.transcript
        data["transcript"] = str(transcript) if transcript else None
        data["events"] = sum(1 for _event in rec.events())
        data["files"] = sum(1 for entry in walk_tree(rec.path.parent, rec.run_id) if not entry.is_dir)
    return data


def root_option(func: F) -> F:
    return click.option(
        "--root",
        type=click.Path(file_okay=False, path_type=Path),
        help="The recordings folder (default: the one `run` uses without --recordings-dir).",
    )(func)


def _recordings(ctx: click.Context, root: Path | None) -> Recordings:
    chosen = root if root is not None else (ctx.obj or {}).get("root")
    return Recordings(chosen if chosen is not None else default_recordings_root())


def scope_options(func: F) -> F:
    func = click.option(
        "--all",
        "all_workspaces",
        is_flag=True,
        help="Every recording under the root, whichever workspace made it.",
    )(func)
    return click.option(
        "--workspace",
        type=click.Path(file_okay=False, path_type=Path),
        help="The workspace whose recordings to act on (default: the current folder).",
    )(func)


def _scope(workspace: Path | None, all_workspaces: bool) -> Path | None:
    """The workspace to filter by (None: everything)."""
    if all_workspaces:
        if workspace is not None:
            raise click.UsageError("--all and --workspace exclude each other")
        return None
    return (workspace or Path.cwd()).resolve()


def _message(exc: BaseException) -> str:
    return error_text(exc).replace("Recordings().list()", "`console-bridge recordings list`")


def _get(recs: Recordings, run_id: str) -> Recording:
    try:
        return recs.get(run_id)
    except BridgeError as exc:
        fail(_message(exc))


RECORDINGS_HELP = f"""Manage the session recordings (calls, code, output, images: unredacted).

\b
Every `run` session records under ROOT/sessions/RUN_ID/. The default ROOT is
{default_recordings_root()}
(`run --recordings-dir` chooses another; so does --root here). A recording is
finalized when its session closed cleanly; a live one (its server still runs)
is never deleted or pruned. Where a RUN_ID is asked for, the session id that
`console-bridge ps` lists (like 20261129T181911-1a2b3c4d) names its recording too.

\b
Examples:
  console-bridge recordings list
  console-bridge recordings show 20261129T181911.868300580Z-0000007855
  console-bridge recordings prune --older-than 7d --keep-last 20 --dry-run
  console-bridge recordings prune --max-size 1G
  console-bridge recordings export 20261129T181911.868300580Z-0000007855 out/
  console-bridge recordings delete 20261129T181911.868300580Z-0000007855
  console-bridge recordings --root ./recs list --json
"""


@click.group("recordings", help=RECORDINGS_HELP)
@root_option
@click.pass_context
def recordings_group(ctx: click.Context, root: Path | None) -> None:
    ctx.obj = {"root": root}


@recordings_group.command(
    "list",
    help="""List the current workspace's recordings, newest first (--all: every workspace's).

\b
Examples:
  console-bridge recordings list
  console-bridge recordings list --all
  console-bridge recordings list --workspace ../analysis --root ./recs --json
""",
)
@root_option
@scope_options
@click.option("--json", "json_output", is_flag=True, help="Print JSON.")
@click.pass_context
def list_recordings(
    ctx: click.Context, root: Path | None, workspace: Path | None, all_workspaces: bool, json_output: bool
) -> None:
    recs = _recordings(ctx, root)
    scope = _scope(workspace, all_workspaces)
    found = recs.list(workspace=scope)
    where = f"under {recs.root}" + (f" for workspace {scope}" if scope is not None else "")
    if json_output:
        document = {"root": str(recs.root), "workspace": str(scope) if scope else None}
        click.echo(json.dumps({**document, "recordings": [_as_dict(r) for r in found]}, indent=2))
        return
    if not found:
        hint = " (--all lists every workspace's)" if scope is not None else ""
        click.echo(f"no recordings {where}{hint}")
        return
    rows = [
        [r.run_id, iso(r.started_at) or "?", human_size(r.size_bytes), _state(r), r.profile or "?", r.workspace or "?"]
        for r in found
    ]
    click.echo(table(["run id", "started (UTC)", "size", "state", "profile", "workspace"], rows))
    total = sum(r.size_bytes for r in found)
    click.echo(f"\n{len(found)} recording{'s' if len(found) != 1 else ''}, {human_size(total)}, {where}")


@recordings_group.command(
    "show",
    help="""Show one recording: where it is, its state, size and events.

\b
Examples:
  console-bridge recordings show RUN_ID
  console-bridge recordings show RUN_ID --transcript
  console-bridge recordings show RUN_ID --json
""",
)
@click.argument("run_id")
@root_option
@click.option("--transcript", is_flag=True, help="Print the transcript too.")
@click.option("--json", "json_output", is_flag=True, help="Print JSON.")
@click.pass_context
def show_recording(ctx: click.Context, run_id: str, root: Path | None, transcript: bool, json_output: bool) -> None:
    rec = _get(_recordings(ctx, root), run_id)
    data = _as_dict(rec, detail=True)
    if json_output:
        click.echo(json.dumps(data, indent=2))
        return
    width = max(len(key) for key in data) + 1
    click.echo("\n".join(f"{(key + ':').ljust(width)} {value}" for key, value in data.items()))
    if transcript and rec.transcript is not None:
        try:  # never through a symlink: a forged recording could point its transcript at a host secret
            text = read_file(rec.path, rec.transcript.name, _TRANSCRIPT_CAP).decode("utf-8", errors="replace")
        except (BridgeError, OSError) as exc:
            fail(f"cannot show the transcript of {rec.run_id}: {_message(exc)}")
        # The transcript is the cells' text: shown as `run` shows their output, never obeyed.
        shown = CellOutput(raw=False, environ=os.environ)
        body = shown.feed(text) + shown.flush()
        if body and not body.endswith("\n"):
            body += "\n"
        click.echo("\n" + shown.opening() + body + shown.closing(), nl=False)


@recordings_group.command(
    "prune",
    help="""Delete recordings by age, count and total size (never a live one).

A recording goes when it is older than --older-than, or beyond the newest
--keep-last, or when the newer ones already add up to --max-size. The rules apply
to the current workspace's recordings (what `recordings list` shows); --all applies
them to every recording under the root.

\b
Examples:
  console-bridge recordings prune --older-than 7d
  console-bridge recordings prune --keep-last 20
  console-bridge recordings prune --max-size 1G --dry-run
""",
)
@root_option
@scope_options
@click.option("--older-than", type=Duration(), help="Age, like 7d, 12h, 30m, 2w.")
@click.option("--keep-last", type=click.IntRange(min=0), metavar="N", help="Keep the newest N.")
@click.option("--max-size", type=ByteSize(), help="Total size to keep, like 500M or 1G.")
@click.option("--dry-run", is_flag=True, help="Only list what would be deleted.")
@click.option("--json", "json_output", is_flag=True, help="Print JSON.")
@click.pass_context
def prune_recordings(
    ctx: click.Context,
    root: Path | None,
    workspace: Path | None,
    all_workspaces: bool,
    older_than: dt.timedelta | None,
    keep_last: int | None,
    max_size: int | None,
    dry_run: bool,
    json_output: bool,
) -> None:
    if older_than is None and keep_last is None and max_size is None:
        raise click.UsageError("give at least one of --older-than, --keep-last, --max-size")
    recs = _recordings(ctx, root)
    scope = _scope(workspace, all_workspaces)
    sizes = {rec.run_id: rec.size_bytes for rec in recs.list(workspace=scope)}
    try:
        gone = recs.prune(
            older_than=older_than, keep_last=keep_last, max_total_bytes=max_size, dry_run=dry_run, workspace=scope
        )
    except (BridgeError, OSError) as exc:
        fail(f"pruning {recs.root} failed: {_message(exc)}")
    freed = sum(sizes.get(rec.run_id, 0) for rec in gone)
    if json_output:
        document = {
            "root": str(recs.root),
            "dry_run": dry_run,
            "removed": [rec.run_id for rec in gone],
            "freed_bytes": freed,
        }
        click.echo(json.dumps(document, indent=2))
        return
    verb = "would delete" if dry_run else "deleted"
    for rec in gone:
        click.echo(f"{verb} {rec.run_id} ({human_size(sizes.get(rec.run_id, 0))})")
    count = len(gone)
    click.echo(f"{verb} {count} recording{'s' if count != 1 else ''}, {human_size(freed)}, under {recs.root}")


@recordings_group.command(
    "delete",
    help="""Delete recordings (a live one is refused).

\b
Examples:
  console-bridge recordings delete RUN_ID
  console-bridge recordings delete RUN_ID OTHER_RUN_ID --root ./recs
""",
)
@click.argument("run_ids", nargs=-1, required=True, metavar="RUN_ID...")
@root_option
@click.pass_context
def delete_recordings(ctx: click.Context, run_ids: tuple[str, ...], root: Path | None) -> None:
    recs = _recordings(ctx, root)
    for run_id in run_ids:
        try:
            recs.delete(run_id)
        except (BridgeError, OSError) as exc:
            fail(_message(exc))
        click.echo(f"deleted {run_id}")


@recordings_group.command(
    "export",
    help="""Write one recording as a .tar.gz archive to DEST (a file, or a folder for RUN_ID.tar.gz), or
with --format ipynb as a Jupyter notebook (DEST a .ipynb file, or a folder for RUN_ID.ipynb): the
session's cells in order with their language, outputs, images and failures.

\b
Examples:
  console-bridge recordings export RUN_ID ./exports/
  console-bridge recordings export RUN_ID ./session.tar.gz
  console-bridge recordings export --format ipynb RUN_ID ./session.ipynb
""",
)
@click.argument("run_id")
@click.argument("dest", type=click.Path())
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["archive", "ipynb"]),
    default="archive",
    show_default=True,
    help="archive: the recording as .tar.gz; ipynb: a notebook of its cells.",
)
@root_option
@click.pass_context
def export_recording(ctx: click.Context, run_id: str, dest: str, fmt: str, root: Path | None) -> None:
    recs = _recordings(ctx, root)
    try:
        if dest.endswith(("/", os.sep)):  # a folder that may not exist yet
            Path(dest).mkdir(parents=True, exist_ok=True)
        target = recs.export(run_id, dest, format=fmt)
    except (BridgeError, OSError) as exc:
        fail(_message(exc))
    click.echo(str(target))
