#!/usr/bin/env bash
# Case (b) of where users are: a normal user with no delegated cgroup, on the CI machine itself.
# Run as root: makes the user (once), gives it a clean clone of this checkout and a venv from the
# system's /usr/bin/python3 (what a Debian or Ubuntu user has), then, as that user, runs the README's
# main command and the confinement tests. Everything it makes lives in that user's home, which it
# owns; nothing else of the machine is touched. Exits non-zero when any step fails.
#
#   sudo bash scripts/ci-nonroot.sh            # user cbci, every confinement test
#   CB_USER=alice bash scripts/ci-nonroot.sh tests/confinement/test_view.py
set -euo pipefail
cd "$(dirname "$0")/.."
user=${CB_USER:-cbci}
tests=("$@")
[ ${#tests[@]} -gt 0 ] || tests=(tests/confinement tests/test_readme.py::test_the_quick_start_runs_as_written_in_a_fresh_folder
  tests/jupyter/test_sandbox_kernel.py)
if [ "$(id -u)" != 0 ]; then
  echo "ci-nonroot: run this as root (it creates the user $user); as a normal user, run the README's commands" >&2
  exit 2
fi
start=$(date +%s)
id "$user" >/dev/null 2>&1 || useradd -m -s /bin/bash "$user"
home=$(getent passwd "$user" | cut -d: -f6)
repo="$home/console-bridge"
rm -rf "$repo"
# The clone holds exactly what is committed plus the working tree's tracked changes (CI: a clean clone).
git ls-files -z | tar --null -T - -cf - | { mkdir -p "$repo" && tar -xf - -C "$repo"; }
chown -R "$user:" "$repo"
as_user() { runuser -u "$user" -- env -i HOME="$home" USER="$user" PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 "$@"; }
# A venv from the system Python: the package as a user installs it for notebooks (the [jupyter] and
# [datascience] extras: IPython in the worker, the sandboxed kernel), both mcp-console versions, the test runner.
as_user bash -c "cd '$repo' && /usr/bin/python3 -m venv .venv && .venv/bin/python -m pip install -q --upgrade pip \
  && .venv/bin/python -m pip install -q -e '.[jupyter,datascience]' nbclient pytest pytest-timeout pytest-xdist hypothesis \
  && /usr/bin/python3 -m venv .venv-mcp-console-0.0.5 && .venv-mcp-console-0.0.5/bin/python -m pip install -q 'mcp-console==0.0.5'"
echo "ci-nonroot: user $user ($(id -u "$user")), venv from /usr/bin/python3 ready in $(( $(date +%s) - start ))s"
as_user bash -c "cd '$repo' && .venv/bin/console-bridge doctor"
as_user bash -c "cd '$repo' && .venv/bin/console-bridge run examples/ci/analysis.py"
as_user bash -c "cd '$repo' && .venv/bin/python -m pytest -p no:cacheprovider -q ${tests[*]}"
echo "ci-nonroot: passed in $(( $(date +%s) - start ))s"
