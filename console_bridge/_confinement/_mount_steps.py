"""The steps of a session's mount plan, as typed records: ``_view.View.plan`` writes them, the
supervisor hands them (as JSON) to ``_namespaces.apply_plan``, which applies them in order.

Types only: ``_namespaces`` runs in the stdlib-only supervisor and reads them for the type checker
(``TYPE_CHECKING``), so a step the view writes and the one the namespaces code reads cannot drift
apart without mypy saying so.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

__all__ = ["MountPlan", "MountStep", "WatchSpec"]


class _Path(TypedDict):
    path: str


class EmptyStep(_Path):
    op: Literal["empty"]  # an empty read-only folder, bound over what a mask hides


class SymlinkStep(_Path):
    op: Literal["symlink"]
    target: str


class TmpfsStep(_Path, total=False):
    op: Literal["tmpfs"]
    mode: int
    size: int | None
    session_owned: bool  # belongs to the session's root (root's sessions: a host id of its block)


class BindStep(_Path, total=False):
    op: Literal["bind"]
    source: str
    writable: bool
    idmap: bool  # the user's own place, idmapped through the session's user namespace


class DirStep(_Path):
    op: Literal["dir"]


class DevStep(_Path):
    op: Literal["dev"]  # the sandbox's /dev (``path`` is /dev)


class ProcStep(_Path):
    op: Literal["proc"]


class ShimStep(_Path):
    op: Literal["shim"]
    sources: list[str]
    hide: list[str]


class MaskStep(_Path):
    op: Literal["mask"]


class PinStep(_Path):
    op: Literal["pin"]  # a folder on the way to a hidden name, bound onto itself: no cell renames it


MountStep = (
    EmptyStep | SymlinkStep | TmpfsStep | BindStep | DirStep | DevStep | ProcStep | ShimStep | MaskStep | PinStep
)


class WatchSpec(TypedDict):
    names: list[str]  # hidden names the remasker keeps hidden (``_remask``)
    etc: str | None  # a tree whose entries not everyone may read are hidden at any depth
    helper: NotRequired[str]  # the socket of the host process's shared remasker (``_remaskd``)


class MountPlan(TypedDict, total=False):
    root: str
    steps: list[MountStep]
    watch: WatchSpec
    ids: dict[str, Any]  # root's sessions: the block of host ids to claim (``_idmap.IdRange.config``)
