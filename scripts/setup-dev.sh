#!/usr/bin/env bash
# Install everything console-bridge needs to run and to test, from the repo's own files.
# Idempotent: re-running only updates. Used by .ci/run and by newcomers.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

# System packages this needs (Debian/Ubuntu names): python3-venv, and libpython3.X-dev for the
# worker's embedding library (mcp-console loads libpython3.X.so); r-base-core for R cells.
if ! "$PY" -c 'import venv, ensurepip' >/dev/null 2>&1; then
  echo "setup-dev: $PY cannot make venvs; install python3-venv (sudo apt-get install python3-venv)" >&2
  exit 1
fi
lib=$("$PY" -c 'import sysconfig as s, os; v = s.get_config_var; print(os.path.join(v("LIBDIR") or "", v("LDLIBRARY") or "") if v("Py_ENABLE_SHARED") else "")')
if [ -n "$lib" ] && [ ! -e "$lib" ]; then
  ver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  echo "setup-dev: $lib is missing: Python cells need it (mcp-console embeds Python)." >&2
  echo "setup-dev: install it with: sudo apt-get install libpython$ver-dev   (then run this again)" >&2
  exit 1
fi

# The project and its test tools, in .venv (also the worker environment of the console).
step=$(date +%s)
echo "setup-dev: .venv: console-bridge with its test tools, mcp-console 0.0.6, IPython, pandas, matplotlib (a few minutes the first time)"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[test]"
echo "setup-dev: .venv ready ($(( $(date +%s) - step ))s)"

# The second qualified mcp-console version, in its own environment (the binaries share a name).
echo "setup-dev: .venv-mcp-console-0.0.5: the other qualified mcp-console"
[ -x .venv-mcp-console-0.0.5/bin/python ] || "$PY" -m venv .venv-mcp-console-0.0.5
.venv-mcp-console-0.0.5/bin/python -m pip install -q "mcp-console==0.0.5"
