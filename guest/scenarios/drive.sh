#!/usr/bin/env bash
# Inside the guest, as alice: run check.py in each kind of scope a user's process lives in.
#   login         the ssh login session (session-N.scope, owned by root: not delegated)
#   user-scope    systemd-run --user --scope (a scope under user@1000.service)
#   user-service  systemd-run --user --wait --pipe (a transient service of the user manager)
# Then, once (in the login scope), the CI example: ci_example.py runs examples/ci/run-analysis.sh
# as a CI job would (needs ~/bed/repo and ~/bed/wheels: guest/run.sh --repo).
# GUEST_SCOPES="login user-scope" picks scopes; GUEST_CHECKS="api attacks" picks checks
# (check.py --only; "ci-example" is the CI example); CONSOLE_BRIDGE_GUEST_ENFORCE is passed on.
# Prints check.py's lines and one "SCOPE <name> exit=<rc> seconds=<s>" line per scope; exits 1
# when any scope failed.
set -u
BED=$(cd "$(dirname "$0")/../.." && pwd)
PY=$HOME/venv/bin/python
CHECK=$BED/guest/scenarios/check.py
only=()
ci_example=1
[ -z "${GUEST_CHECKS:-}" ] || ci_example=0
for c in ${GUEST_CHECKS:-}; do
    if [ "$c" = ci-example ]; then ci_example=1; else only+=(--only "$c"); fi
done
scopes=${GUEST_SCOPES:-login user-scope user-service}
[ -n "${GUEST_CHECKS:-}" ] && [ ${#only[@]} -eq 0 ] && scopes=   # only the CI example
envs=()
[ -z "${CONSOLE_BRIDGE_GUEST_ENFORCE:-}" ] || envs=(-E "CONSOLE_BRIDGE_GUEST_ENFORCE=$CONSOLE_BRIDGE_GUEST_ENFORCE")
status=0
for scope in $scopes; do
    case $scope in
    login) wrap=() ;;
    user-scope) wrap=(systemd-run --user --scope --quiet "${envs[@]}") ;;
    user-service) wrap=(systemd-run --user --wait --pipe --quiet --working-directory="$HOME" "${envs[@]}") ;;
    *) echo "drive.sh: unknown scope $scope" >&2; exit 2 ;;
    esac
    SECONDS=0
    "${wrap[@]}" "$PY" "$CHECK" --scope "$scope" --bed "$BED" "${only[@]}" </dev/null
    rc=$?
    echo "SCOPE $scope exit=$rc seconds=$SECONDS"
    [ "$rc" = 0 ] || status=1
done
if [ "$ci_example" = 1 ]; then
    SECONDS=0
    python3 "$BED/guest/scenarios/ci_example.py" --bed "$BED" --scope login </dev/null
    rc=$?
    echo "SCOPE login/ci-example exit=$rc seconds=$SECONDS"
    [ "$rc" = 0 ] || status=1
fi
exit "$status"
