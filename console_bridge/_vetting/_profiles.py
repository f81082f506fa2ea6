"""Sandbox profiles: data files that declare the server settings they need and the sandbox the
server must then advertise; validated (nothing that widens the sandbox) and translated per version."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from packaging.version import Version

from console_bridge._confinement._deny import expand_deny
from console_bridge._confinement._limits import Limits, limits_from_mapping
from console_bridge._errors import LaunchRefused
from console_bridge._vetting._sandbox import HOST_TMP, TMPDIR, WORKSPACE, SandboxPolicy

__all__ = ["Profile", "available_profiles", "load_profile", "profiles_dir", "translate"]

_TOP_KEYS = {"name", "summary", "server", "expects", "deny_read", "read_roots", "limits"}
_SERVER_KEYS = {
    "sandbox.profile",
    "sandbox.network",
    "sandbox.tempdir",
    "sandbox.filesystem.read_only",
    "sandbox.filesystem.deny",
    "sandbox.filesystem.read_write",
}
_EXPECT_KEYS = {"sandboxed", "network", "writable"}
_WIDENING_HINTS = {
    "environment": "sets the child environment",
    "inherit_environment": "passes the host environment to evaluated code",
    "executables": "selects executables",
    "python": "selects the Python executable or environment",
    "r": "selects the R installation",
    "sandbox": "replaces the whole sandbox setting",
    "no_sandbox": "disables the sandbox",
    "sandbox.enabled": "disables the sandbox",
    "resolver": "changes the dependency resolver",
    "tool": "changes the tool the model sees",
    "startup": "runs startup code",
}


def profiles_dir() -> Path:
    """Where the shipped profiles live (inside the wheel, or the repo's sandbox_profiles/)."""
    shipped = resources.files("console_bridge").joinpath("sandbox_profiles")
    if shipped.is_dir():
        return Path(str(shipped))
    return Path(__file__).resolve().parents[2] / "sandbox_profiles"


def available_profiles() -> dict[str, Path]:
    """Shipped profile names and their files."""
    folder = profiles_dir()
    return {path.stem: path for path in sorted(folder.glob("*.yaml"))} if folder.is_dir() else {}


@dataclass(frozen=True, slots=True)
class Profile:
    """A validated sandbox profile."""

    name: str
    summary: str
    source: Path
    base: str  # "read_only" | "workspace"
    tempdir: str  # "managed" | "read_only"
    read_only: tuple[str, ...]
    deny: tuple[str, ...]
    read_write: tuple[str, ...]  # relative to the workspace, or absolute
    expects_writable: frozenset[str]
    deny_read: tuple[str, ...] = ()  # absolute, '~/...' or '{workspace}/...'; on top of the bridge's own list
    read_roots: tuple[str, ...] = ()  # host folders added to the view read-only (absolute or '~/...')
    limits: Limits = field(default_factory=Limits)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "summary": self.summary,
            "source": str(self.source),
            "server": {
                "sandbox.profile": self.base,
                "sandbox.network": "restricted",
                "sandbox.tempdir": self.tempdir,
                "sandbox.filesystem.read_only": list(self.read_only),
                "sandbox.filesystem.deny": list(self.deny),
                "sandbox.filesystem.read_write": list(self.read_write),
            },
            "expects": {"sandboxed": True, "network": "restricted", "writable": sorted(self.expects_writable)},
            "deny_read": list(self.deny_read),
            "read_roots": list(self.read_roots),
            "limits": self.limits.as_dict(),
        }


def _refuse(source: Path, key: str, problem: str) -> LaunchRefused:
    return LaunchRefused(
        f"sandbox profile {str(source)!r}: {key!r} {problem}; console-bridge profiles may only narrow the "
        "sandbox (no network, no sandbox changes beyond the workspace and writable_roots). Fix the profile.",
        details={"profile": str(source), "key": key},
    )


class _StrictLoader(yaml.SafeLoader):
    """A safe loader that refuses duplicate keys (PyYAML keeps the last one silently)."""


def _unique_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    loader.flatten_mapping(node)
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in seen
        except TypeError:  # unhashable: construct_mapping reports it
            continue
        if duplicate:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}: give each setting once", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, Mapping) and prefix not in _SERVER_KEYS:
        for key, item in value.items():
            _flatten(f"{prefix}.{key}" if prefix else str(key), item, out)
    elif prefix in out:  # nested and dotted spellings of one setting: one would silently win
        raise KeyError(prefix)
    else:
        out[prefix] = value


def load_profile(profile: str | os.PathLike[str]) -> Profile:
    """Load a shipped profile by name, or a user's profile file; refuse anything that widens."""
    text = os.fspath(profile)
    shipped = available_profiles()
    if text in shipped:
        source = shipped[text]
    else:
        source = Path(text).expanduser()
        if not source.is_file():
            names = ", ".join(shipped) or "none"
            raise LaunchRefused(
                f"sandbox profile {text!r} is neither a shipped profile ({names}) nor a readable file; "
                "pass one of those names or a path to a profile YAML"
            )
    try:
        document = yaml.load(source.read_text(encoding="utf-8"), Loader=_StrictLoader)
    except (OSError, yaml.YAMLError, UnicodeDecodeError) as exc:
        raise LaunchRefused(f"sandbox profile {str(source)!r} cannot be read as YAML: {exc}") from None
    if not isinstance(document, Mapping):
        raise LaunchRefused(f"sandbox profile {str(source)!r} must be a YAML mapping with 'server' and 'expects'")
    for key in document:
        if key not in _TOP_KEYS:
            raise _refuse(source, str(key), f"is not a profile key (allowed: {', '.join(sorted(_TOP_KEYS))})")
    server: dict[str, Any] = {}
    try:
        _flatten("", document.get("server") or {}, server)
    except KeyError as exc:
        raise _refuse(source, str(exc.args[0]), "is given twice (nested and dotted); give each setting once") from None
    for key, value in server.items():
        if key not in _SERVER_KEYS:
            hint = next(
                (why for name, why in _WIDENING_HINTS.items() if key == name or key.startswith(name + ".")), None
            )
            raise _refuse(source, key, hint or "is not a setting profiles may use")
        _check_value(source, key, value)
    expects = document.get("expects")
    if not isinstance(expects, Mapping):
        raise _refuse(source, "expects", "is missing: declare the sandbox the server must advertise")
    for key in expects:
        if key not in _EXPECT_KEYS:
            raise _refuse(source, f"expects.{key}", "is not an expectation key (sandboxed, network, writable)")
    if expects.get("sandboxed") is not True:
        raise _refuse(source, "expects.sandboxed", "must be true: console-bridge never runs code unsandboxed")
    if expects.get("network") != "restricted":
        raise _refuse(source, "expects.network", "must be 'restricted': network access widens the sandbox")
    writable = expects.get("writable")
    if not isinstance(writable, list) or not all(item in (TMPDIR, WORKSPACE) for item in writable):
        raise _refuse(source, "expects.writable", "must be a list drawn from 'tmpdir' and 'workspace'")
    base = str(server.get("sandbox.profile", "read_only"))
    tempdir = str(server.get("sandbox.tempdir", "managed"))
    implied = ({TMPDIR} if tempdir == "managed" else set()) | ({WORKSPACE} if base == "workspace" else set())
    if set(writable) != implied:
        raise _refuse(
            source,
            "expects.writable",
            f"is {sorted(writable)} but the server settings imply {sorted(implied)}",
        )
    deny_read = document.get("deny_read") or []
    if not isinstance(deny_read, list) or not all(isinstance(item, str) and item for item in deny_read):
        raise _refuse(source, "deny_read", "must be a list of paths (absolute, '~/...' or '{workspace}/...')")
    for item in deny_read:
        expand_deny(item, Path("/workspace"), source=f"profile {str(source)!r}: deny_read")
    read_roots = document.get("read_roots") or []
    if not isinstance(read_roots, list) or not all(isinstance(item, str) and item for item in read_roots):
        raise _refuse(source, "read_roots", "must be a list of folder paths (absolute or '~/...')")
    raw_limits = document.get("limits") or {}
    if not isinstance(raw_limits, Mapping):
        raise _refuse(source, "limits", "must be a mapping (memory, processes, cpu, tmpdir, recording, enforce)")
    limits = limits_from_mapping(raw_limits, str(source))
    name = document.get("name", source.stem)
    return Profile(
        name=str(name),
        summary=str(document.get("summary", "")),
        source=source.resolve(),
        base=base,
        tempdir=tempdir,
        read_only=tuple(server.get("sandbox.filesystem.read_only") or ()),
        deny=tuple(server.get("sandbox.filesystem.deny") or ()),
        read_write=tuple(server.get("sandbox.filesystem.read_write") or ()),
        expects_writable=frozenset(writable),
        deny_read=tuple(deny_read),
        read_roots=tuple(read_roots),
        limits=limits,
    )


def _check_value(source: Path, key: str, value: Any) -> None:
    if key == "sandbox.profile":
        if value == "inherit_codex":
            raise _refuse(source, key, "is inherit_codex, whose sandbox cannot be verified")
        if value not in ("read_only", "workspace"):
            raise _refuse(source, key, f"is {value!r}; use read_only or workspace")
    elif key == "sandbox.network":
        if value != "restricted":
            raise _refuse(source, key, f"is {value!r}: network access or a proxy widens the sandbox")
    elif key == "sandbox.tempdir":
        if value == "read_write":
            raise _refuse(source, key, "is read_write, which opens the host's temporary directories")
        if value not in ("managed", "read_only"):
            raise _refuse(source, key, f"is {value!r}; use managed or read_only")
    elif not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise _refuse(source, key, "must be a list of path strings")
    elif key == "sandbox.filesystem.read_write":
        for item in value:
            if Path(item).is_absolute() or item.startswith("~") or ".." in Path(item).parts:
                raise _refuse(
                    source,
                    key,
                    f"grants writes to {item!r}; profiles may grant only paths inside the workspace "
                    "(relative, no '..'); use writable_roots for anything else",
                )


def _abs_in(workspace: Path, item: str) -> str:
    path = Path(item).expanduser()
    return str(path if path.is_absolute() else workspace / path)


def translate(
    profile: Profile,
    version: Version,
    workspace: Path,
    writable_roots: Sequence[Path],
    deny: Sequence[str] = (),
) -> tuple[list[str], SandboxPolicy]:
    """The ``-c`` settings for this binary version and the sandbox it must then advertise.

    ``deny`` is the bridge's own deny list (secrets, other sessions, recordings); the
    profile's ``sandbox.filesystem.deny`` entries are added to it.
    """
    denied = list(dict.fromkeys([*deny, *(_abs_in(workspace, d) for d in profile.deny)]))
    settings: list[tuple[str, str]] = [("sandbox.network", "restricted")]
    writable: set[str] = {str(root) for root in writable_roots}
    read_write = [_abs_in(workspace, item) for item in profile.read_write]
    read_only = [_abs_in(workspace, item) for item in profile.read_only]
    writable.update(read_write)
    if version >= Version("0.0.6"):
        settings.append(("sandbox.profile", profile.base))
        settings.append(("sandbox.tempdir", profile.tempdir))
        if profile.base == "workspace":
            writable.add(WORKSPACE)
    else:
        if profile.tempdir != "managed":
            raise LaunchRefused(
                f"sandbox profile {profile.name!r} sets sandbox.tempdir={profile.tempdir}, which mcp-console "
                f"{version} does not support; use mcp-console 0.0.6 or a profile without it"
            )
        if profile.base == "workspace":
            # 0.0.5 has no sandbox.profile: grant the workspace itself, keep .git/.agents read-only, and
            # .claude (0.0.6 keeps it; the bridge makes it for 0.0.5 too: _confinement._shared_roots).
            read_write.append(str(workspace))
            writable.add(str(workspace))
            read_only.extend(
                str(workspace / name)
                for name in (".git", ".agents", ".claude")
                if (workspace / name).exists() and str(workspace / name) not in denied
            )
    if profile.tempdir == "managed":
        writable.add(TMPDIR)
    if read_write:
        settings.append(("sandbox.filesystem.read_write", json.dumps(read_write)))
    if read_only:
        settings.append(("sandbox.filesystem.read_only", json.dumps(read_only)))
    if denied:
        settings.append(("sandbox.filesystem.deny", json.dumps(denied)))
    args = [part for key, value in settings for part in ("-c", f"{key}={value}")]
    assert HOST_TMP not in writable
    return args, SandboxPolicy(sandboxed=True, network="restricted", writable=frozenset(writable))
