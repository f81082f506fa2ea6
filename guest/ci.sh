#!/usr/bin/env bash
# CI's guest stage: build the guest from scratch, boot it once, run every scenario in every scope
# (guest/scenarios/drive.sh), then print a table of the checks and the timings.
#   guest/ci.sh          # as root; everything lands in .guest/ (logs in .guest/logs/)
# Exit 0 when every check held, 1 when one failed, 2 when the bed itself could not be built or booted.
# Then, in the same boot, as root: guest/scenarios/drive-root.sh (doctor, privilege; GUEST_ROOT=0 skips it).
# Environment: GUEST_SCOPES, GUEST_CHECKS, CONSOLE_BRIDGE_GUEST_ENFORCE (see drive.sh), PYTHON (host
# python with pip, default python3), GUEST_CMD_TIMEOUT (s for all scenarios, default 2400).
set -uo pipefail
{ # the whole script is one block: bash reads it before running it, so editing it mid-run is safe
REPO=$(cd "$(dirname "$0")/.." && pwd)
G=${GUEST_DIR:-$REPO/.guest}
start=$SECONDS
missing=()
for tool in debootstrap qemu-system-x86_64 qemu-img mke2fs ssh ssh-keygen; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "guest: missing ${missing[*]}: apt-get install debootstrap qemu-system-x86 qemu-utils e2fsprogs openssh-client" >&2
    exit 2
fi
# From scratch: only the debootstrap .deb folder would survive a rebuild, and CI starts from a fresh clone.
rm -rf "$G/logs" && mkdir -p "$G/logs"
if ! "$REPO/guest/build.sh"; then
    echo "guest: building the image failed (logs in $G/logs)" >&2
    exit 2
fi
scenarios=$G/logs/scenarios.log
env_args=()
for v in GUEST_SCOPES GUEST_CHECKS CONSOLE_BRIDGE_GUEST_ENFORCE; do
    [ -z "${!v:-}" ] || env_args+=("$v=$(printf %q "${!v}")")
done
then_root=(--then-root "${env_args[*]} bash /home/alice/bed/guest/scenarios/drive-root.sh")
[ "${GUEST_ROOT:-1}" = 1 ] || then_root=()
GUEST_CMD_TIMEOUT=${GUEST_CMD_TIMEOUT:-2400} "$REPO/guest/run.sh" --repo "${then_root[@]}" \
    "${env_args[*]} bash bed/guest/scenarios/drive.sh" \
    2>&1 | tee "$scenarios"
rc=${PIPESTATUS[0]}
echo
echo "===== guest summary (logs: $G/logs/; scenario output: $scenarios)"
"${PYTHON:-python3}" "$REPO/guest/scenarios/check.py" --summary "$scenarios"
summary_rc=$?
echo "build: $(sed 's/s$/ s/' "$G/logs/build-times.txt" | paste -sd, | sed 's/,/, /g') (rootfs = debootstrap)"
grep -h '^\[guest-run\] \(boot:\|command\)' "$G"/logs/run-*.times | sed 's/^\[guest-run\] /run: /'
echo "guest stage wall time $((SECONDS - start)) s"
case $rc in
0) [ "$summary_rc" = 0 ] && exit 0 || exit 1 ;;
1) exit 1 ;;
*) echo "guest: the guest run ended with $rc (124/125: no boot or no ssh; see the serial log)" >&2; exit 2 ;;
esac
}
