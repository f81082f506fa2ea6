#!/usr/bin/env bash
# Run untrusted analysis code in CI inside a verified console-bridge sandbox: every step that
# console-bridge.yml (GitHub Actions) and gitlab-ci.yml run, in one script, so that a test runs
# exactly these steps (tests/examples/test_ci_script.py here, guest/scenarios/ci-example.sh in
# the Debian 12 guest).
#
#   examples/ci/run-analysis.sh [FILE...]     # default: analysis.py, relative to ANALYSIS_DIR
#
# Run it as the job's normal user (GitHub's `runner`); it uses sudo only for the two host
# settings below, and only when they are not already right.
#   1. system packages: the Python's venv module (python3-venv) and the unversioned
#      libpython3.X.so that mcp-console's worker embeds (libpython3.X-dev), via apt-get;
#   2. unprivileged user namespaces: kernel.apparmor_restrict_unprivileged_userns=0 (Ubuntu 23.10
#      and later forbid them), then a check that the setting took effect and that `unshare -Ur`
#      really works;
#   3. a fresh venv with console-bridge installed from CONSOLE_BRIDGE_SPEC (default: the
#      console-bridge checkout this script is in; console-bridge is not on PyPI);
#   4. `console-bridge doctor`: a required check that fails ends the job here, with its message;
#   5. `console-bridge run --artifacts ARTIFACTS_DIR FILE...` in ANALYSIS_DIR, as this user.
# The code's output reaches the log through the CLI's hygiene (under GITHUB_ACTIONS=true it is
# fenced with ::stop-commands::, controls are escaped); this script itself never prints a
# line of the code's output or of the artifacts, and its own annotations are fixed texts.
#
# Exit status: 0 the analysis ran and passed; 1 the analysis raised (its error is in the log and
# in ARTIFACTS_DIR/output.txt); 3 the sandbox cannot be set up here (a host setting, doctor, or a
# refused launch); 4 the analysis ran past ANALYSIS_TIMEOUT; 2 this script's own setup failed
# (a package could not be installed, pip failed).
#
# Environment (all optional):
#   CONSOLE_BRIDGE_SPEC    what pip installs (default: the checkout around this script). In your
#                          own repository: a pinned git reference, e.g.
#                          "console-bridge @ git+https://github.com/OWNER/console-bridge@COMMIT"
#   CONSOLE_BRIDGE_PYTHON  the Python to make the venv from (default: python3 on PATH; a Debian or
#                          Ubuntu system Python gets its packages from apt)
#   CONSOLE_BRIDGE_VENV    where the venv goes (default: $RUNNER_TEMP/console-bridge-venv, else a new
#                          folder in ${TMPDIR:-/tmp}); an existing venv is reused, console-bridge
#                          reinstalled into it
#   ANALYSIS_PACKAGES      more packages for the analysis, installed into the same venv (cells
#                          import from it), e.g. "pandas matplotlib"
#   ANALYSIS_DIR           the folder the analysis runs in, its workspace (default: this script's folder)
#   ARTIFACTS_DIR          where output.txt, images, report.json and recording/ go (default:
#                          ANALYSIS_DIR/artifacts)
#   ANALYSIS_TIMEOUT       seconds per file (console-bridge run --timeout; default: the CLI's)
#   PIP_*                  pip's own settings apply (PIP_INDEX_URL, PIP_NO_INDEX, PIP_FIND_LINKS, ...)
set -uo pipefail
{ # one block: bash reads all of it before running it

SELF_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
GITHUB=0
[ "${GITHUB_ACTIONS:-}" = true ] && GITHUB=1

say() { printf 'run-analysis: %s\n' "$*"; }
# A fixed-text annotation (GitHub shows it on the run's page); never called with the code's output.
annotate() {
    local level=$1 title=$2 text=$3
    if [ "$GITHUB" = 1 ]; then
        text=${text//'%'/'%25'}; text=${text//$'\r'/'%0D'}; text=${text//$'\n'/'%0A'}
        printf '::%s title=%s::%s\n' "$level" "$title" "$text"
    fi
}
die() { # die CODE MESSAGE
    say "FAILED: $2" >&2
    annotate error run-analysis "$2"
    exit "$1"
}
as_root() { # run a command as root: directly when we are root, else by passwordless sudo
    if [ "$(id -u)" = 0 ]; then "$@"; else sudo -n "$@"; fi
}
can_be_root() { [ "$(id -u)" = 0 ] || { command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; }; }

step_packages() {
    local facts version library
    facts=$("$PY" -I -c '
import os, sys, sysconfig
v = sysconfig.get_config_var
print("%d.%d" % sys.version_info[:2])
print(os.path.join(v("LIBDIR") or "", v("LDLIBRARY") or "") if v("Py_ENABLE_SHARED") else "")
') || die 2 "$PY does not run"
    version=$(sed -n 1p <<<"$facts")
    library=$(sed -n 2p <<<"$facts")
    say "python: $PY (Python $version), user $(id -un) (uid $(id -u))"
    local missing=()
    "$PY" -I -c 'import ensurepip, venv' 2>/dev/null || missing+=("python$version-venv")
    # mcp-console embeds the worker's Python from the unversioned libpython3.X.so (Debian and
    # Ubuntu ship it only in libpython3.X-dev); a static build has nothing to load.
    if [ -n "$library" ] && [ ! -e "$library" ]; then missing+=("libpython$version-dev"); fi
    if [ ${#missing[@]} -eq 0 ]; then
        say "system packages: the venv module and ${library:-a static libpython} are present"
        return
    fi
    command -v apt-get >/dev/null 2>&1 \
        || die 2 "$PY lacks ${missing[*]} and this is no Debian/Ubuntu host (no apt-get): install the equivalent packages"
    can_be_root || die 2 "$PY lacks ${missing[*]}; install them as root: apt-get install ${missing[*]}"
    say "installing ${missing[*]} (apt-get)"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null \
        && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
        || die 2 "apt-get install ${missing[*]} failed"
    "$PY" -I -c 'import ensurepip, venv' 2>/dev/null || die 2 "$PY still has no venv module after installing ${missing[*]}"
    if [ -n "$library" ] && [ ! -e "$library" ]; then die 2 "$library is still missing after installing ${missing[*]}"; fi
}

# (CONSOLE_BRIDGE_SYSCTL_ROOT: the library's test hook for another /proc/sys, honoured here too)
sysctl_value() { cat "${CONSOLE_BRIDGE_SYSCTL_ROOT:-/proc/sys}/$1" 2>/dev/null; }

step_userns() {
    local key=kernel/apparmor_restrict_unprivileged_userns value
    value=$(sysctl_value "$key")
    if [ -n "$value" ] && [ "$value" != 0 ]; then
        can_be_root || die 3 "AppArmor forbids unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=$value) and this user cannot sudo: as root run sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"
        say "allowing unprivileged user namespaces: sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"
        as_root sysctl -q -w kernel.apparmor_restrict_unprivileged_userns=0 >/dev/null \
            || die 3 "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 failed"
        value=$(sysctl_value "$key")
        [ "$value" = 0 ] || die 3 "kernel.apparmor_restrict_unprivileged_userns is still $value after setting it to 0"
        say "kernel.apparmor_restrict_unprivileged_userns is now 0"
    elif [ -n "$value" ]; then
        say "kernel.apparmor_restrict_unprivileged_userns is already 0"
    else
        say "no AppArmor user-namespace restriction on this kernel"
    fi
    local other
    for other in kernel/unprivileged_userns_clone user/max_user_namespaces; do
        if [ "$(id -u)" != 0 ] && [ "$(sysctl_value "$other")" = 0 ]; then
            die 3 "$(tr / . <<<"$other")=0 forbids user namespaces for this user; as root: sysctl -w $(tr / . <<<"$other")=$([ "$other" = user/max_user_namespaces ] && echo 15000 || echo 1)"
        fi
    done
    # The setting is not the proof: create a user namespace the way the sandbox will.
    if command -v unshare >/dev/null 2>&1; then
        local why
        why=$(unshare --user --map-root-user --mount true 2>&1) \
            || die 3 "this user cannot create a user + mount namespace (unshare -Urm: ${why:-failed}); in a container, allow it (--security-opt seccomp=unconfined, or a privileged container)"
        say "unshare -Urm works: this user can create user + mount namespaces"
    else
        say "no unshare(1) to test namespaces with; console-bridge doctor checks them"
    fi
}

step_install() {
    local spec=${CONSOLE_BRIDGE_SPEC:-}
    if [ -z "$spec" ]; then
        local checkout
        checkout=$(cd "$SELF_DIR/../.." && pwd)
        grep -q '^name = "console-bridge"' "$checkout/pyproject.toml" 2>/dev/null \
            || die 2 "$checkout is not a console-bridge checkout: set CONSOLE_BRIDGE_SPEC (console-bridge is not on PyPI; e.g. a pinned git reference)"
        spec=$checkout
    fi
    local pip=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check) started=$SECONDS
    if [ ! -x "$VENV/bin/python" ]; then
        say "making the venv $VENV"
        "$PY" -m venv "$VENV" || die 2 "$PY -m venv $VENV failed"
    else
        # pip would call a same-version console-bridge "already satisfied": put this one in first
        say "reusing the venv $VENV: reinstalling console-bridge from $spec"
        "${pip[@]}" --no-deps --force-reinstall "$spec" || die 2 "pip install $spec failed (see above)"
    fi
    local extra=()
    # shellcheck disable=SC2206  # a list of requirement words, split on purpose
    [ -z "${ANALYSIS_PACKAGES:-}" ] || extra=($ANALYSIS_PACKAGES)
    say "pip install $spec${extra[*]:+ ${extra[*]}}"
    "${pip[@]}" "$spec" "${extra[@]}" || die 2 "pip install $spec failed (see above)"
    say "installed console-bridge $("$VENV/bin/python" -c 'import console_bridge; print(console_bridge.__version__)') in $((SECONDS - started)) s"
}

step_doctor() {
    local report rc
    say "console-bridge doctor"
    report=$(cd "$ANALYSIS_DIR" && "$VENV/bin/console-bridge" doctor 2>&1)
    rc=$?
    printf '%s\n' "$report"
    if [ "$rc" != 0 ]; then
        local failed
        failed=$(grep '^FAIL ' <<<"$report" | sed 's/  */ /g' | paste -sd ';' -)
        die 3 "console-bridge doctor: a required check failed: ${failed:-exit $rc}"
    fi
}

step_run() {
    local rc started=$SECONDS
    say "console-bridge run --artifacts $ARTIFACTS_DIR $* (in $ANALYSIS_DIR)"
    (cd "$ANALYSIS_DIR" && "$VENV/bin/console-bridge" run --artifacts "$ARTIFACTS_DIR" \
        ${ANALYSIS_TIMEOUT:+--timeout "$ANALYSIS_TIMEOUT"} "$@")
    rc=$?
    say "console-bridge run exited $rc after $((SECONDS - started)) s; artifacts in $ARTIFACTS_DIR"
    case $rc in
    0) ;;
    1) annotate error analysis "the analysis raised an error (exit 1): see the log and output.txt in the artifacts" ;;
    3) annotate error analysis "the sandbox could not be set up or verified (exit 3): see the log" ;;
    4) annotate error analysis "the analysis ran past its time limit (exit 4)" ;;
    *) annotate error analysis "console-bridge run exited $rc: see the log" ;;
    esac
    if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
        printf '### console-bridge analysis\n\nexit status %s after %s s; artifacts: `console-bridge-artifacts`\n' \
            "$rc" "$((SECONDS - started))" >>"$GITHUB_STEP_SUMMARY"
    fi
    return "$rc"
}

main() {
    PY=${CONSOLE_BRIDGE_PYTHON:-$(command -v python3)}
    [ -n "$PY" ] || die 2 "no python3 on PATH: install python3 or set CONSOLE_BRIDGE_PYTHON"
    ANALYSIS_DIR=$(cd "${ANALYSIS_DIR:-$SELF_DIR}" && pwd) || die 2 "ANALYSIS_DIR ${ANALYSIS_DIR:-} is not a folder"
    ARTIFACTS_DIR=${ARTIFACTS_DIR:-$ANALYSIS_DIR/artifacts}
    case $ARTIFACTS_DIR in /*) ;; *) ARTIFACTS_DIR=$PWD/$ARTIFACTS_DIR ;; esac
    if [ -n "${CONSOLE_BRIDGE_VENV:-}" ]; then
        VENV=$CONSOLE_BRIDGE_VENV
    elif [ -n "${RUNNER_TEMP:-}" ]; then
        VENV=$RUNNER_TEMP/console-bridge-venv
    else
        VENV=$(mktemp -d "${TMPDIR:-/tmp}/console-bridge-venv.XXXXXX") || die 2 "cannot make a temporary folder"
    fi
    local files=("$@")
    [ ${#files[@]} -gt 0 ] || files=(analysis.py)
    case $(uname -s) in
    Linux) ;;
    *) die 3 "console-bridge confines sessions on Linux only, and this is $(uname -s): run the job on a Linux runner (GitHub: runs-on: ubuntu-24.04)" ;;
    esac
    step_packages
    step_userns
    step_install
    step_doctor
    step_run "${files[@]}"
}

main "$@"; exit
}
