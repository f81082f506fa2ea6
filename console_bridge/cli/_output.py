"""Output hygiene for the command line: see ``console_bridge/_hygiene.py`` (shared with the Jupyter magics)."""

from __future__ import annotations

from console_bridge._hygiene import CellOutput, escape_controls, host_block, host_line

__all__ = ["CellOutput", "escape_controls", "host_block", "host_line"]
