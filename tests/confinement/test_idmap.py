"""Which host ids root's sessions run as, and what refuses a root host (pure: no processes)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from console_bridge import LaunchRefused
from console_bridge._confinement._idmap import (
    BLOCK,
    DEFAULT_RANGE,
    IdRange,
    choose_range,
    range_problem,
    session_mapping,
)
from console_bridge._confinement._namespaces import SYSCALLS, SetupError, syscall_number
from console_bridge._confinement._unconfinable import host_gap
from tests.confinement.conftest import host_kind

ROOT = ("root", "0")
NO_SUBIDS: dict[str, list[tuple[str, int, int]]] = {}


def test_the_default_range_is_systemds_unused_block_below_2_31() -> None:
    ids = choose_range(None, NO_SUBIDS, ROOT)
    assert (ids.start, ids.count, ids.source) == (*DEFAULT_RANGE, "default")
    assert ids.start == 0x70000000 and ids.end < 0x7FFE0000 < 1 << 31
    assert ids.blocks == 4094 and ids.count % BLOCK == 0
    assert range_problem(ids, ROOT, [("root", 0), ("nobody", 65534)], [("root", 0)], NO_SUBIDS) is None


def test_the_environment_then_roots_own_subid_entries_choose_the_range() -> None:
    subids = {"/etc/subuid": [("root", 200000, 131072)], "/etc/subgid": [("root", 200000, 131072)]}
    assert choose_range(None, subids, ROOT) == IdRange(200000, 131072, "/etc/subuid")
    assert choose_range("300000:65536", subids, ROOT) == IdRange(300000, 65536, "CONSOLE_BRIDGE_ID_RANGE")
    # uid and gid ranges that differ are not used (a session maps both the same way)
    odd = {"/etc/subuid": [("root", 200000, 65536)], "/etc/subgid": [("root", 900000, 65536)]}
    assert choose_range(None, odd, ROOT).source == "default"
    # another user's entry is not root's
    assert choose_range(None, {"/etc/subuid": [("alice", 100000, 65536)]}, ROOT).source == "default"


@pytest.mark.parametrize("text", ["300000", "a:b", "1:2:3", ":65536"])
def test_a_malformed_range_is_refused_naming_the_variable(text: str) -> None:
    with pytest.raises(LaunchRefused, match="CONSOLE_BRIDGE_ID_RANGE") as info:
        choose_range(text, NO_SUBIDS, ROOT)
    assert "START:COUNT" in str(info.value)


@pytest.mark.parametrize(
    ("ids", "accounts", "subids", "words"),
    [
        (IdRange(1000, 65536, "CONSOLE_BRIDGE_ID_RANGE"), [], NO_SUBIDS, "below 65536"),
        (IdRange((1 << 31) - 100, 65536, "CONSOLE_BRIDGE_ID_RANGE"), [], NO_SUBIDS, "2^31"),
        (IdRange(300000, 1000, "CONSOLE_BRIDGE_ID_RANGE"), [], NO_SUBIDS, "fewer than one session's block"),
        (IdRange(300000, 65536, "CONSOLE_BRIDGE_ID_RANGE"), [("svc", 300005)], NO_SUBIDS, "'svc' has uid 300005"),
        (
            IdRange(100000, 65536 * 4, "CONSOLE_BRIDGE_ID_RANGE"),
            [],
            {"/etc/subuid": [("alice", 165536, 65536)]},
            "gives 'alice' the ids 165536-231071",
        ),
    ],
)
def test_a_range_in_use_or_unsafe_is_named(
    ids: IdRange, accounts: list[tuple[str, int]], subids: dict[str, list[tuple[str, int, int]]], words: str
) -> None:
    problem = range_problem(ids, ROOT, accounts, [], subids)
    assert problem is not None and words in problem


def test_roots_own_subid_range_does_not_overlap_itself() -> None:
    subids = {"/etc/subuid": [("root", 200000, 65536)], "/etc/subgid": [("root", 200000, 65536)]}
    ids = choose_range(None, subids, ROOT)
    assert range_problem(ids, ROOT, [], [], subids) is None
    assert range_problem(ids, ROOT, [], [("build", 200001)], subids) == "the group 'build' has gid 200001, inside it"


def test_the_mapping_of_this_process_is_read_from_its_maps() -> None:
    mapping = session_mapping(os.getpid())
    assert mapping is not None and str(mapping["uid"]).split()[0] == "0"
    assert session_mapping(None) is None


def test_syscall_numbers_come_from_a_table_per_architecture(monkeypatch: pytest.MonkeyPatch) -> None:
    assert SYSCALLS["x86_64"]["pivot_root"] == 155 and SYSCALLS["aarch64"]["pivot_root"] == 41
    assert SYSCALLS["x86_64"]["keyctl"] == 250 and SYSCALLS["aarch64"]["keyctl"] == 219
    for name in ("open_tree", "move_mount", "mount_setattr"):  # shared by every architecture since 5.1
        assert SYSCALLS["x86_64"][name] == SYSCALLS["aarch64"][name]
    real = os.uname()
    monkeypatch.setattr(os, "uname", lambda: os.uname_result((*real[:4], "riscv64")))
    with pytest.raises(SetupError, match=r"riscv64.*aarch64, x86_64"):
        syscall_number("pivot_root")


def test_root_hosts_that_cannot_map_ids_are_refused_with_the_setting() -> None:
    assert host_gap(host_kind(uid=0, privileged=True)) is None
    disabled = host_gap(host_kind(uid=0, privileged=True, max_user_namespaces="0"))
    assert disabled is not None and "user.max_user_namespaces" in disabled.text()
    container = host_gap(host_kind(uid=0, privileged=False))
    assert container is not None and "--user 1000" in container.text() and "uid 0" in container.text()
    old = host_gap(host_kind(uid=0, privileged=True, kernel=(5, 10)))
    assert old is not None and "5.12" in old.text() and "5.10" in old.text()
    arch = host_gap(host_kind(machine="riscv64"))
    assert arch is not None and "riscv64" in arch.text()
    # AppArmor's restriction is on unprivileged namespaces: root is not refused for it
    assert host_gap(host_kind(uid=0, privileged=True, userns_problem="AppArmor forbids ...")) is None


def test_live_sessions_hold_blocks_of_their_own_and_give_them_back(tmp_path: Path) -> None:
    from console_bridge._confinement._namespaces import claim_ids, release_ids

    locks = str(tmp_path / "ids")
    held = [claim_ids(locks, 1 << 20, 4 * BLOCK, BLOCK) for _ in range(4)]
    assert sorted(base for base, _ in held) == [(1 << 20) + i * BLOCK for i in range(4)]
    with pytest.raises(SetupError, match="every block"):
        claim_ids(locks, 1 << 20, 4 * BLOCK, BLOCK)
    base, fd = held.pop()
    release_ids(locks, base, fd)
    assert not (tmp_path / "ids" / str(base)).exists()
    again = claim_ids(locks, 1 << 20, 4 * BLOCK, BLOCK)
    assert again[0] == base  # the one block given back
    for base, fd in [*held, again]:
        release_ids(locks, base, fd)
    assert list((tmp_path / "ids").iterdir()) == []
