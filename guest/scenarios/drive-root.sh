#!/usr/bin/env bash
# Inside the guest, as root (guest/run.sh --then-root): the checks a root-started session must pass
# (doctor, no host privilege in a cell: check.py --only ...), with alice's venv.
# Prints check.py's lines and one "SCOPE root exit=<rc> seconds=<s>" line.
set -u
BED=/home/alice/bed
SECONDS=0
cd /root && HOME=/root /home/alice/venv/bin/python "$BED/guest/scenarios/check.py" --scope root --bed "$BED" \
    --only doctor --only privilege </dev/null
rc=$?
echo "SCOPE root exit=$rc seconds=$SECONDS"
exit "$rc"
