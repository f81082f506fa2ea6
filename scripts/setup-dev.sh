#!/usr/bin/env bash
# Install everything console-bridge needs to run and to test, from the repo's own files.
# Idempotent: re-running only updates. Used by .ci/run and by newcomers.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

# The project and its test tools, in .venv (also the worker environment of the console).
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[test]"

# The second qualified mcp-console version, in its own environment (the binaries share a name).
[ -x .venv-mcp-console-0.0.5/bin/python ] || "$PY" -m venv .venv-mcp-console-0.0.5
.venv-mcp-console-0.0.5/bin/python -m pip install -q "mcp-console==0.0.5"
