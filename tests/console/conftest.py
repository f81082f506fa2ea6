"""Fixtures for console tests: the real mcp-console binaries of both qualified versions, and the
session fixtures of ``tests/support/sessions``."""

from __future__ import annotations

from tests.support.sessions import mcp_console, no_leaks, recordings, state_dir, workspace

__all__ = ["mcp_console", "no_leaks", "recordings", "state_dir", "workspace"]
