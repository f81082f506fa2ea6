from tests.console.conftest import mcp_console, no_leaks, recordings, state_dir, workspace

__all__ = ["mcp_console", "no_leaks", "recordings", "state_dir", "workspace"]
