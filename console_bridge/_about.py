"""The bridge's own version, on the ground floor so that any room may name it (a recording's
sidecar says which bridge wrote it). ``pyproject.toml`` carries the same number."""

__version__ = "0.1.0"
