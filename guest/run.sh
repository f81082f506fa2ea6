#!/usr/bin/env bash
# Boot the guest made by guest/build.sh, run ONE command in it as alice over ssh, power it off.
#
#   guest/run.sh 'console-bridge doctor'          # in ~alice, `bash -lc`, a login-session scope
#   guest/run.sh --sync 'python -c "import console_bridge"'
#                                                 # first reinstall this clone's wheel (--no-deps)
#   guest/run.sh --repo 'bash bed/guest/scenarios/drive.sh'   # every scenario as alice, one boot
#   guest/run.sh --repo --then-root 'bash /home/alice/bed/guest/scenarios/drive-root.sh' 'bash bed/...'
#                                                 # then a command as root (guest/ci.sh: the root checks)
#
# Before COMMAND runs, the clone's guest/, examples/ and README.md are copied to ~alice/bed.
# --repo also copies a clean clone (the files git tracks or would add) to ~alice/bed/repo and the
# wheels of .guest/wheels to ~alice/bed/wheels (for the CI example, which pip-installs the checkout).
# The guest boots from .guest/image.raw with -snapshot (nothing persists), under TCG (KVM does
# not work on this project's machines; GUEST_ACCEL=kvm where it does). Its only network is
# slirp with restrict=on and a hostfwd from 127.0.0.1:<free port> to its sshd.
# Logs: the serial console of the boot in .guest/logs/serial-<stamp>.log; timing lines
# ("[guest-run] ...") go to stderr and to .guest/logs/run-<stamp>.times. Exit code: COMMAND's;
# 124/125 when the guest did not come up.
# Environment: GUEST_DIR, GUEST_MEM (MiB, default 4096), GUEST_SMP (default 2),
# GUEST_BOOT_TIMEOUT (s, default 300), GUEST_CMD_TIMEOUT (s, default 1800), GUEST_ACCEL (tcg|kvm),
# GUEST_ARCH (amd64, the default, or arm64: the guest of guest/build-arm64.sh in .guest-arm64, booted by
# qemu-system-aarch64 -M virt; its defaults: GUEST_BOOT_TIMEOUT=1800, GUEST_SSH_TIMEOUT=90),
# GUEST_SSH_TIMEOUT (ssh's ConnectTimeout, s, default 5: it also bounds the wait for sshd's banner).
set -uo pipefail
{ # the whole script is one block: bash reads it before running it, so editing it mid-run is safe
REPO=$(cd "$(dirname "$0")/.." && pwd)
case ${GUEST_ARCH:-amd64} in
amd64) G=${GUEST_DIR:-$REPO/.guest}; QEMU_SYSTEM=(qemu-system-x86_64); CONSOLE=ttyS0; BUILD=guest/build.sh ;;
arm64) G=${GUEST_DIR:-$REPO/.guest-arm64}; QEMU_SYSTEM=(qemu-system-aarch64 -M virt); CONSOLE=ttyAMA0; BUILD=guest/build-arm64.sh
    : "${GUEST_BOOT_TIMEOUT:=1800}" "${GUEST_SSH_TIMEOUT:=90}" ;;   # TCG: a 6-minute boot, a slow sshd
*) echo "guest/run.sh: GUEST_ARCH must be amd64 or arm64" >&2; exit 2 ;;
esac
SYNC=0
COPY_REPO=0
ROOT_CMD=
while [ $# -gt 1 ]; do
    case $1 in
    --sync) SYNC=1; shift ;;
    --repo) COPY_REPO=1; shift ;;
    --then-root) ROOT_CMD=$2; shift 2 ;;
    *) break ;;
    esac
done
[ $# -eq 1 ] || { sed -n '2,/^set /{/^set /d;s/^# \{0,1\}//;p}' "$0" >&2; exit 2; }
CMD=$1
KEY=$G/ssh/id_ed25519
for f in "$G/image.raw" "$G/vmlinuz" "$G/initrd.img" "$KEY"; do
    [ -e "$f" ] || { echo "guest/run.sh: $f is missing: run $BUILD first" >&2; exit 2; }
done
STAMP=$(date +%Y%m%d-%H%M%S)-$$
mkdir -p "$G/logs"
SERIAL=$G/logs/serial-$STAMP.log
TIMES=$G/logs/run-$STAMP.times
say() { echo "[guest-run] $*" | tee -a "$TIMES" >&2; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

case ${GUEST_ACCEL:-tcg} in
tcg) ACCEL=(-accel tcg,thread=multi -cpu max) ;;
kvm) ACCEL=(-accel kvm -cpu host) ;;
*) echo "guest/run.sh: GUEST_ACCEL must be tcg or kvm" >&2; exit 2 ;;
esac
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
SSH=(ssh -i "$KEY" -p "$PORT" -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null
    -o LogLevel=ERROR -o ConnectTimeout="${GUEST_SSH_TIMEOUT:-5}" -o ServerAliveInterval=15 -o ServerAliveCountMax=8)

WHEEL_DIR=
if [ "$SYNC" = 1 ]; then
    WHEEL_DIR=$(mktemp -d "$G/sync.XXXXXX")
    "${PYTHON:-python3}" -m pip wheel -q --disable-pip-version-check --no-deps -w "$WHEEL_DIR" "$REPO" >"$WHEEL_DIR/log" 2>&1 \
        || { echo "guest/run.sh: building the wheel failed:" >&2; cat "$WHEEL_DIR/log" >&2; rm -rf "$WHEEL_DIR"; exit 125; }
fi

t0=$(now)
"${QEMU_SYSTEM[@]}" "${ACCEL[@]}" -m "${GUEST_MEM:-4096}" -smp "${GUEST_SMP:-2}" \
    -display none -monitor none -serial file:"$SERIAL" -no-reboot \
    -kernel "$G/vmlinuz" -initrd "$G/initrd.img" -append "root=/dev/vda rw console=$CONSOLE panic=-1" \
    -drive file="$G/image.raw",format=raw,if=virtio,cache=unsafe -snapshot \
    -netdev user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:"$PORT"-:22 -device virtio-net-pci,netdev=n0 \
    </dev/null >"$G/logs/qemu-$STAMP.log" 2>&1 &
QEMU=$!
cleanup() {
    if kill -0 "$QEMU" 2>/dev/null; then
        kill "$QEMU" 2>/dev/null
        for _ in 1 2 3 4 5; do kill -0 "$QEMU" 2>/dev/null || break; sleep 1; done
        kill -9 "$QEMU" 2>/dev/null
    fi
    [ -z "$WHEEL_DIR" ] || rm -rf "$WHEEL_DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
say "booting (${GUEST_ACCEL:-tcg}, ssh on 127.0.0.1:$PORT, serial log $SERIAL)"

while ! "${SSH[@]}" -n root@127.0.0.1 true 2>/dev/null; do
    kill -0 "$QEMU" 2>/dev/null || { say "qemu exited during boot:"; tail -n 25 "$SERIAL" "$G/logs/qemu-$STAMP.log" >&2; exit 125; }
    if awk -v a="$t0" -v b="$(now)" -v t="${GUEST_BOOT_TIMEOUT:-300}" 'BEGIN { exit !(b - a > t) }'; then
        say "no ssh after ${GUEST_BOOT_TIMEOUT:-300}s; last serial lines:"; tail -n 25 "$SERIAL" >&2; exit 124
    fi
    sleep 1
done
t_ssh=$(since "$t0")
state=$("${SSH[@]}" -n root@127.0.0.1 'timeout 120 systemctl is-system-running --wait;
    systemctl --failed --no-legend --plain | cut -d" " -f1 | sed "s/^/failed unit: /";
    systemctl is-active user@1000.service | sed "s/^/user@1000.service: /"' 2>&1)
say "boot: sshd after ${t_ssh}s, boot finished after $(since "$t0")s: $(echo "$state" | paste -sd';')"

ts=$(now)
tar -C "$REPO" -cf - guest README.md examples | "${SSH[@]}" alice@127.0.0.1 'rm -rf ~/bed && mkdir ~/bed && tar -xf - -C ~/bed' \
    || { say "copying the scenarios into the guest failed"; exit 125; }
if [ -n "$WHEEL_DIR" ]; then
    # shellcheck disable=SC2016
    "${SSH[@]}" alice@127.0.0.1 'mkdir -p ~/sync && rm -f ~/sync/*.whl && tar -xf - -C ~/sync &&
        ~/venv/bin/pip install -q --disable-pip-version-check --no-index --no-deps --force-reinstall ~/sync/*.whl' \
        < <(tar -C "$WHEEL_DIR" -cf - --exclude log .) || { say "reinstalling the project in the guest failed"; exit 125; }
fi
if [ "$COPY_REPO" = 1 ]; then
    [ -d "$G/wheels" ] || { say "--repo: $G/wheels is missing (guest/build.sh wheels)"; exit 125; }
    # shellcheck disable=SC2016
    { git -C "$REPO" ls-files -z -co --exclude-standard | tar -C "$REPO" --null -T - -cf - --transform 's,^,repo/,' &&
        tar -C "$G" -cf - --dereference wheels; } |
        "${SSH[@]}" alice@127.0.0.1 'tar -xif - -C ~/bed' \
        || { say "copying the clean clone and the wheels into the guest failed"; exit 125; }
fi
say "copied guest/ examples/ README.md$([ -n "$WHEEL_DIR" ] && echo ' and the project wheel')$([ "$COPY_REPO" = 1 ] && echo ', a clean clone and the wheels') in $(since "$ts")s"

ts=$(now)
if [ -t 0 ]; then STDIN=(-n); else STDIN=(); fi
"${SSH[@]}" "${STDIN[@]}" "${GUEST_USER:-alice}@127.0.0.1" "exec timeout ${GUEST_CMD_TIMEOUT:-1800} bash -lc $(printf %q "$CMD")"
rc=$?
if [ -n "$ROOT_CMD" ]; then
    "${SSH[@]}" -n root@127.0.0.1 "exec timeout ${GUEST_CMD_TIMEOUT:-1800} bash -lc $(printf %q "$ROOT_CMD")"
    root_rc=$?
    [ "$rc" != 0 ] || rc=$root_rc
fi
t_cmd=$(since "$ts")
"${SSH[@]}" -n root@127.0.0.1 'journalctl -b --no-pager -o short-monotonic' >"$G/logs/journal-$STAMP.log" 2>&1
"${SSH[@]}" -n root@127.0.0.1 'systemctl poweroff' >/dev/null 2>&1
for _ in $(seq 60); do kill -0 "$QEMU" 2>/dev/null || break; sleep 1; done
say "command exit code $rc after ${t_cmd}s; total $(since "$t0")s (journal: $G/logs/journal-$STAMP.log)"
exit "$rc"
}
