"""The chaos tests share the console fixtures (real binaries, workspaces, the private-TMPDIR check)."""

from tests.support.sessions import mcp_console, no_leaks, recordings, state_dir, workspace

__all__ = ["mcp_console", "no_leaks", "recordings", "state_dir", "workspace"]
