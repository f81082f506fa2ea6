#!/usr/bin/env bash
# Containers as users run them: Docker (Debian's docker.io, runc), an image made from a Debian 12
# root file system, the project installed into it from this checkout's wheel, run as uid 1000.
#   (a) Docker's default seccomp profile: `console-bridge run` exits 3 with the one-line refusal
#       that names `--security-opt seccomp=<the shipped profile>`;
#   (b) `--security-opt seccomp=sandbox_profiles/seccomp-container.json`: the same run exits 0,
#       confined, and `console-bridge doctor` passes; so does the run with the security options of
#       the GitHub Actions recipe (examples/ci/github-docker-job.yml), read from it;
#   (e) with that profile, a cell that fights back (scripts/container/hostile.py: the user's
#       ~/.bash_history, a host /tmp secret, /etc/shadow, /proc/sys, the venv, /etc, the network,
#       /proc/*/root, setuid, mount) gets nothing and the next file runs; workflow commands it
#       prints are fenced; a fork bomb that catches EAGAIN is stopped at --processes (exit 1); as
#       root inside, the run is refused naming --user 1000 (no cell holds the container's root);
#   (c) without any one call that profile adds to Docker's default, the run is refused (exit 3);
#   (d) Podman (Debian's, runc, the same root file system by --rootfs): its default profile runs
#       confined; Docker's default profile applied by Podman refuses naming `podman run ...`.
#
#   sudo bash scripts/ci-container.sh
#
# Run as root. dockerd is started by hand on a socket, data root and exec root of its own under a
# temporary folder (no iptables, no bridge: it touches no host networking, never /var/lib/docker)
# and stopped at the end, with everything it made removed; Podman's storage, run and network
# folders are under the same temporary folder (its netavark run folder /run/containers/networks
# cannot be moved: removed at the end when this script made it). The root file system is the guest
# harness's (CONTAINER_ROOTFS, default .guest/rootfs: guest/build.sh rootfs config), or, when
# that is missing, a minimal debootstrap of its own (cached in .guest/debs). Wheels: this
# checkout's (pip wheel) plus its dependencies for cp311 from PyPI. The VM this project runs on
# needs `--ulimit nofile=1024:1024 --ulimit nproc=4096:4096` (the defaults ask for more than its
# hard limits). Exits non-zero when any step or assertion fails.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
G=$REPO/.guest
ROOTFS=${CONTAINER_ROOTFS:-$G/rootfs}
PY=${PYTHON:-python3}
DOCKER_BIN=/usr/bin/docker   # Debian's client, the daemon's own version (not another one on PATH)
start=$(date +%s)
log() { printf '[ci-container %(%H:%M:%S)T +%ss] %s\n' -1 "$(( $(date +%s) - start ))" "$*" >&2; }
die() { log "FAILED: $*"; exit 1; }
[ "$(id -u)" = 0 ] || { echo "ci-container: run this as root (it starts dockerd)" >&2; exit 2; }

WORK=$(mktemp -d /tmp/console-bridge-containers.XXXXXX)
made_run_containers=
[ -e /run/containers ] || made_run_containers=1
SOCK=$WORK/docker.sock
docker() { "$DOCKER_BIN" -H "unix://$SOCK" "$@"; }
cleanup() {
    local pid
    if [ -f "$WORK/dockerd.pid" ]; then
        pid=$(cat "$WORK/dockerd.pid")
        docker ps -aq 2>/dev/null | xargs -r "$DOCKER_BIN" -H "unix://$SOCK" rm -f >/dev/null 2>&1 || true
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
        kill -9 "$pid" 2>/dev/null || true
    fi
    # whatever dockerd left mounted under its own folders (overlays, netns, shm), deepest first
    awk -v w="$WORK" 'index($5, w) == 1 {print $5}' /proc/self/mountinfo | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
    rm -rf "$WORK"
    [ -z "$made_run_containers" ] || rm -rf /run/containers
    log "dockerd stopped, $WORK removed"
}
trap cleanup EXIT

if [ ! -x /usr/sbin/dockerd ] || [ ! -x "$DOCKER_BIN" ] || [ ! -x /usr/bin/podman ]; then
    log "installing Debian's docker.io and podman"
    # No service may start from the package's scripts (a daemon on /var/lib/docker is not ours).
    guard=
    [ -e /usr/sbin/policy-rc.d ] || { printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && guard=1; }
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io podman >"$WORK/apt.log" 2>&1 \
        || { [ -z "$guard" ] || rm -f /usr/sbin/policy-rc.d; tail -20 "$WORK/apt.log"; die "apt-get install docker.io podman"; }
    [ -z "$guard" ] || rm -f /usr/sbin/policy-rc.d
fi

log "starting dockerd on $SOCK"
/usr/sbin/dockerd --host "unix://$SOCK" --data-root "$WORK/data" --exec-root "$WORK/exec" \
    --pidfile "$WORK/dockerd.pid" --iptables=false --ip-masq=false --bridge=none --default-runtime runc \
    >"$WORK/dockerd.log" 2>&1 &
for _ in $(seq 120); do docker version >/dev/null 2>&1 && break; sleep 0.5; done
docker version --format 'dockerd {{.Server.Version}} ready' >&2 || { tail -30 "$WORK/dockerd.log"; die "dockerd did not come up"; }

if [ ! -x "$ROOTFS/usr/bin/python3" ]; then
    ROOTFS=$WORK/rootfs
    log "no guest root file system: debootstrap bookworm (minbase + python3) into $ROOTFS"
    mirror=$({ cat /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null || true; } |
        awk '/^URIs:/ {print $2} /^deb / {print $2}' | awk '!/security/ {print; exit}')
    mkdir -p "$G/debs"
    debootstrap --variant=minbase --cache-dir="$G/debs" --include=python3,python3-venv,libpython3.11-dev \
        bookworm "$ROOTFS" "${mirror:-http://deb.debian.org/debian}" >"$WORK/debootstrap.log" 2>&1 \
        || { tail -20 "$WORK/debootstrap.log"; die debootstrap; }
fi
log "docker import of $ROOTFS"
# (not the guest's kernel, modules, apt cache or its own venv: 0.75 of its 1.1 GB, to import and delete)
tar -C "$ROOTFS" --exclude='./proc/*' --exclude='./sys/*' --exclude='./dev/*' --exclude='./boot/*' \
    --exclude='./usr/lib/modules/*' --exclude='./var/cache/apt/*' --exclude='./home/*/venv' -c . |
    docker import - cb-base >/dev/null

log "wheels: this checkout + its dependencies (cp311, manylinux x86_64)"
mkdir -p "$WORK/wheels"
platforms=(--platform manylinux2014_x86_64)
for v in $(seq 17 36); do platforms+=(--platform "manylinux_2_${v}_x86_64"); done   # bookworm: glibc 2.36
export PIP_CACHE_DIR=$G/cache/pip PIP_DISABLE_PIP_VERSION_CHECK=1
{ "$PY" -m pip wheel -q --no-deps -w "$WORK/wheels" "$REPO" &&
    "$PY" -m pip download -q --only-binary=:all: --python-version 3.11 --implementation cp --abi cp311 \
        "${platforms[@]}" -d "$WORK/wheels" "$(ls "$WORK"/wheels/console_bridge-*.whl)" "mcp-console[client]==0.0.6"
} >"$WORK/wheels.log" 2>&1 || { tail -20 "$WORK/wheels.log"; die "pip wheel/download"; }

log "installing the project into the image (/opt/cb, uid 1000 = user 'cb' if the image has none)"
docker run --name cb-build --network none --ulimit nofile=1024:1024 --ulimit nproc=4096:4096 \
    -v "$WORK/wheels:/wheels:ro" cb-base sh -ec '
        getent passwd 1000 >/dev/null || useradd -m -u 1000 -U cb
        home=$(getent passwd 1000 | cut -d: -f6)
        mkdir -p "$home/analysis" && chown 1000:1000 "$home/analysis"
        python3 -m venv /opt/cb
        /opt/cb/bin/pip install -q --no-index --find-links /wheels console-bridge' >&2
docker commit cb-build cb-test >/dev/null
docker rm cb-build >/dev/null
home=$(docker run --rm --network none --ulimit nofile=1024:1024 --ulimit nproc=4096:4096 cb-test \
    sh -c 'getent passwd 1000 | cut -d: -f6')
profile=/opt/cb/lib/python3.11/site-packages/console_bridge/sandbox_profiles/seccomp-container.json
as_user() {   # as uid 1000 in a fresh container, with the example read-only; then the options given
    local options=("$@")
    docker run --rm --network none --user 1000:1000 --ulimit nofile=1024:1024 --ulimit nproc=4096:4096 \
        -e HOME="$home" -w "$home/analysis" -v "$REPO/examples:/examples:ro" "${options[@]}"
}

log "(a) Docker's default seccomp profile: the run must refuse in one line naming the fix"
set +e
as_user cb-test /opt/cb/bin/console-bridge run /examples/ci/analysis.py >"$WORK/a.out" 2>"$WORK/a.err"
rc=$?
set -e
cat "$WORK/a.err" >&2
[ "$rc" = 3 ] || { cat "$WORK/a.out" >&2; die "(a) exit status $rc, not 3"; }
grep -qF -- "--security-opt seccomp=$profile" "$WORK/a.err" || die "(a) the refusal does not name --security-opt seccomp=$profile"
grep -qF "Docker container" "$WORK/a.err" || die "(a) the refusal does not say it is a Docker container"
# the refusal is one line (after it, run's own summary: "0/1 file ok")
[ "$(grep -c 'cannot confine a session' "$WORK/a.err")" = 1 ] || die "(a) no single refusal line"
grep 'cannot confine a session' "$WORK/a.err" | grep -qF -- "--security-opt seccomp=" || die "(a) the fix is not on the refusal's line"
! grep -q Traceback "$WORK/a.err" || die "(a) a traceback"
[ ! -s "$WORK/a.out" ] || { cat "$WORK/a.out" >&2; die "(a) the refused run printed on stdout"; }
log "(a) ok: exit 3, one line"
as_user cb-test /opt/cb/bin/python -c '
from console_bridge import Console, LaunchRefused
try:
    Console("w")
except LaunchRefused as exc:
    print(exc)
else:
    raise SystemExit("Console() was not refused")' >"$WORK/a2.out" 2>&1 || { cat "$WORK/a2.out" >&2; die "(a) Console()"; }
[ "$(wc -l <"$WORK/a2.out")" = 1 ] && grep -qF -- "--security-opt seccomp=$profile" "$WORK/a2.out" \
    || { cat "$WORK/a2.out" >&2; die "(a) Console() did not refuse in one line naming the fix"; }
log "(a) ok: Console() raises LaunchRefused, one line naming the same fix"
set +e
as_user --user 0:0 cb-test /opt/cb/bin/console-bridge run /examples/ci/analysis.py >"$WORK/root.out" 2>"$WORK/root.err"
rc=$?
set -e
[ "$rc" = 3 ] && grep -q "lacks CAP_SYS_ADMIN.*--user 1000" "$WORK/root.err" \
    || { cat "$WORK/root.out" "$WORK/root.err" >&2; die "(a) as root inside: exit $rc, not the refusal naming --user 1000"; }
log "(a) ok: root inside (no CAP_SYS_ADMIN) refused with exit 3, naming --user 1000"

log "(b) --security-opt seccomp=sandbox_profiles/seccomp-container.json: the run must pass, confined"
t0=$(date +%s%N)
as_user --security-opt "seccomp=$REPO/sandbox_profiles/seccomp-container.json" cb-test \
    /opt/cb/bin/console-bridge run /examples/ci/analysis.py >"$WORK/b.out" 2>"$WORK/b.err" \
    || { cat "$WORK/b.out" "$WORK/b.err" >&2; die "(b) console-bridge run failed"; }
log "(b) run: exit 0 in $(( ($(date +%s%N) - t0) / 1000000 )) ms (a fresh container each)"
tail -5 "$WORK/b.out" >&2
as_user --security-opt "seccomp=$REPO/sandbox_profiles/seccomp-container.json" cb-test \
    /opt/cb/bin/console-bridge doctor >"$WORK/doctor.out" 2>&1 || { cat "$WORK/doctor.out" >&2; die "(b) doctor failed"; }
grep -E '^(ok|info|fail|warn) +(host|namespaces|limit)' "$WORK/doctor.out" >&2 || cat "$WORK/doctor.out" >&2
grep -qE '^info +host +non-root in a Docker container' "$WORK/doctor.out" || die "(b) doctor does not say it is in a Docker container"
log "(b) ok: the run and doctor pass"
# The security options of the GitHub Actions recipe (examples/ci/github-docker-job.yml), as it gives them
recipe=$("$PY" - "$REPO/examples/ci/github-docker-job.yml" "$REPO" <<'PYEOF'
import shlex, sys
text = open(sys.argv[1]).read().replace("\\\n", " ")
line = next(part for part in text.splitlines() if part.strip().startswith("docker run"))
options = shlex.split(line.split(" sh -ec ", 1)[0].replace("$PWD", sys.argv[2]))
print(" ".join(shlex.quote(f"--security-opt={options[i + 1]}") for i, o in enumerate(options) if o == "--security-opt"))
PYEOF
)
[ -n "$recipe" ] || die "(b) no --security-opt found in the GitHub recipe"
eval "as_user $recipe cb-test /opt/cb/bin/console-bridge run /examples/ci/analysis.py" >"$WORK/recipe.out" 2>"$WORK/recipe.err" \
    || { cat "$WORK/recipe.out" "$WORK/recipe.err" >&2; die "(b) the GitHub recipe's options ($recipe): the run failed"; }
log "(b) ok: the GitHub recipe's options ($recipe) run confined"

log "(e) a cell that fights back, with the shipped profile, as uid 1000 and as root inside"
hostile() {   # $1: docker run options for the user, $2: the attack file; the secrets planted first, in the same container
    docker run --rm --network none --ulimit nofile=1024:1024 --ulimit nproc=4096:4096 -e GITHUB_ACTIONS=true \
        -e HOME="$home" -e ATTACK="$2" -w "$home/analysis" -v "$REPO/scripts/container:/attacks:ro" \
        --security-opt "seccomp=$REPO/sandbox_profiles/seccomp-container.json" $1 cb-test sh -c '
            echo "export TOKEN=HISTORY-TOKEN" > "$HOME/.bash_history" 2>/dev/null || true
            echo HOST-SECRET > /tmp/host-secret
            /opt/cb/bin/console-bridge run --processes 64 "/attacks/$ATTACK" /attacks/after.py'
}
for who in "--user 1000:1000" "--user 0:0"; do
    set +e
    hostile "$who" hostile.py >"$WORK/e.out" 2>"$WORK/e.err"
    rc=$?
    set -e
    if [ "$who" = "--user 0:0" ] && [ "$rc" = 3 ] && grep -q "lacks CAP_SYS_ADMIN.*--user 1000" "$WORK/e.err"; then
        log "(e) root inside: refused (exit 3, naming --user 1000): no cell runs as the container's root"
        continue
    fi
    [ "$rc" = 0 ] || { cat "$WORK/e.out" "$WORK/e.err" >&2; die "(e) $who: the hostile run exited $rc"; }
    ! grep -q "TOKEN\|HOST-SECRET\|: GOT " "$WORK/e.out" || { grep "ATTACK" "$WORK/e.out" >&2; die "(e) $who: an attack got through"; }
    [ "$(grep -c '^ATTACK .*: blocked' "$WORK/e.out")" = 10 ] || { cat "$WORK/e.out" >&2; die "(e) $who: not every attack reported"; }
    grep -q "^::stop-commands::" "$WORK/e.out" || { cat "$WORK/e.out" >&2; die "(e) $who: the cell's output was not fenced"; }
    grep -q "after: the session still works" "$WORK/e.out" || die "(e) $who: the next file did not run"
    log "(e) ok: $who: 10 attacks blocked, workflow commands fenced, the next file ran ($(grep -m1 'uid inside' "$WORK/e.out"))"
    set +e
    hostile "$who" forkbomb.py >"$WORK/f.out" 2>"$WORK/f.err"
    rc=$?
    set -e
    [ "$rc" = 1 ] && grep -q "stopped at the processes limit" "$WORK/f.err" && ! grep -q "^GOT" "$WORK/f.out" \
        || { cat "$WORK/f.out" "$WORK/f.err" >&2; die "(e) $who: the fork bomb was not reported as stopped at the limit"; }
    log "(e) ok: $who: a fork bomb that catches EAGAIN is stopped at the processes limit (exit 1)"
done

log "(c) every call the profile adds is needed: without any one of them the run must fail"
for call in $("$PY" -c 'import json, sys; print(*json.load(open(sys.argv[1]))["syscalls"][-1]["names"])' \
        "$REPO/sandbox_profiles/seccomp-container.json"); do
    "$PY" -c 'import json, sys
profile = json.load(open(sys.argv[1]))
profile["syscalls"][-1]["names"].remove(sys.argv[2])
json.dump(profile, open(sys.argv[3], "w"))' "$REPO/sandbox_profiles/seccomp-container.json" "$call" "$WORK/without-$call.json"
    set +e
    as_user --security-opt "seccomp=$WORK/without-$call.json" cb-test \
        /opt/cb/bin/console-bridge run /examples/ci/analysis.py >"$WORK/c.out" 2>"$WORK/c.err"
    rc=$?
    set -e
    [ "$rc" != 0 ] || die "(c) the run passed without $call: the profile adds more than bubblewrap needs"
    [ "$rc" = 3 ] && ! grep -q 'internal error\|Traceback' "$WORK/c.err" \
        || { cat "$WORK/c.err" >&2; die "(c) without $call: exit $rc, not a refusal (3)"; }
    grep -qF -- "--security-opt seccomp=$profile" "$WORK/c.err" || { cat "$WORK/c.err" >&2; die "(c) without $call: no fix named"; }
    log "(c) without $call: exit $rc: $(grep -m1 -oE '(cannot confine|could not be set up|could not start the probe cell).{0,140}' "$WORK/c.err")"
done

log "(d) Podman (runc) on the same root file system"
mkdir -p "$WORK/podman/rootfs"
id=$(docker create cb-test true)
docker export "$id" | tar -x -C "$WORK/podman/rootfs"
docker rm "$id" >/dev/null
rm -f "$WORK/podman/rootfs/.dockerenv"   # (docker export leaves Docker's marker behind)
podman_as_user() {
    podman --root "$WORK/podman/root" --runroot "$WORK/podman/run" --tmpdir "$WORK/podman/tmp" \
        --network-config-dir "$WORK/podman/net" --runtime runc --cgroup-manager cgroupfs --events-backend file \
        run --rm --network none --user 1000:1000 --ulimit nofile=1024:1024 --ulimit nproc=4096:4096 \
        -e HOME="$home" -w "$home/analysis" -v "$REPO/examples:/examples:ro" --rootfs "$@"
}
podroot=$WORK/podman/rootfs:O   # (an overlay: the folder itself stays untouched)
podman_as_user "$podroot" /opt/cb/bin/console-bridge run /examples/ci/analysis.py >"$WORK/d.out" 2>"$WORK/d.err" \
    || { cat "$WORK/d.out" "$WORK/d.err" >&2; die "(d) Podman's default profile: console-bridge run failed"; }
podman_as_user "$podroot" /opt/cb/bin/console-bridge doctor >"$WORK/d-doctor.out" 2>&1 \
    || { cat "$WORK/d-doctor.out" >&2; die "(d) Podman's default profile: doctor failed"; }
grep -qE '^info +host +non-root in a Podman container' "$WORK/d-doctor.out" \
    || { cat "$WORK/d-doctor.out" >&2; die "(d) doctor does not say it is in a Podman container"; }
log "(d) ok: Podman's default profile: run and doctor pass, confined"
set +e
podman_as_user --security-opt "seccomp=$REPO/tests/confinement/data/moby-seccomp-default.json" "$podroot" \
    /opt/cb/bin/console-bridge run /examples/ci/analysis.py >"$WORK/d2.out" 2>"$WORK/d2.err"
rc=$?
set -e
[ "$rc" = 3 ] && grep -qF -- "\`podman run --security-opt seccomp=$profile\`" "$WORK/d2.err" \
    || { cat "$WORK/d2.out" "$WORK/d2.err" >&2; die "(d) Podman with Docker's default profile: exit $rc, not the refusal"; }
log "(d) ok: Podman with Docker's default profile: exit 3 naming podman run --security-opt seccomp=..."
podman_as_user --security-opt "seccomp=$REPO/sandbox_profiles/seccomp-container.json" "$podroot" \
    /opt/cb/bin/console-bridge run /examples/ci/analysis.py >"$WORK/d3.out" 2>"$WORK/d3.err" \
    || { cat "$WORK/d3.out" "$WORK/d3.err" >&2; die "(d) Podman with the shipped profile: run failed"; }
log "(d) ok: Podman with the shipped profile: exit 0"
log "passed in $(( $(date +%s) - start ))s"
