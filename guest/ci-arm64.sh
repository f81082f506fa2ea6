#!/usr/bin/env bash
# The arm64 guest run (issue 34 item 4), beside CI's guest stage (guest/ci.sh) but not in .ci/run:
# under TCG on this project's 2-core machines it takes far longer than CI's time (see guest/README.md,
# "The arm64 guest", for the measured times). Run by hand, once, for a closing note:
#
#   nice -n 19 guest/ci-arm64.sh            # as root; build from scratch, boot, checks, summary
#   ARM64_BUILD=0 nice -n 19 guest/ci-arm64.sh   # reuse .guest-arm64 (only boot + checks)
#
# Builds the guest (guest/build-arm64.sh), boots it once (GUEST_ARCH=arm64 guest/run.sh), and runs
# as alice in the login scope the checks of guest/scenarios/check.py named by ARM64_CHECKS (default
# "doctor cli-run attacks": `console-bridge doctor`, the README's CI analysis examples/ci/analysis.py
# through `console-bridge run`, and the confinement suite's attacks), then prints their table.
# Exit 0 when every check held, 1 when one failed, 2 when the guest could not be built or booted.
set -uo pipefail
{ # the whole script is one block: bash reads it before running it, so editing it mid-run is safe
REPO=$(cd "$(dirname "$0")/.." && pwd)
G=${GUEST_DIR:-$REPO/.guest-arm64}
start=$SECONDS
missing=()
for tool in debootstrap qemu-system-aarch64 mke2fs debugfs cpio dpkg-deb ssh ssh-keygen; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "guest arm64: missing ${missing[*]}: apt-get install debootstrap qemu-system-arm e2fsprogs cpio openssh-client" >&2
    exit 2
fi
if [ "${ARM64_BUILD:-1}" = 1 ]; then
    rm -rf "$G/logs" && mkdir -p "$G/logs"
    "$REPO/guest/build-arm64.sh" || { echo "guest arm64: building the image failed (logs in $G/logs)" >&2; exit 2; }
fi
scenarios=$G/logs/scenarios.log
checks=${ARM64_CHECKS:-doctor cli-run attacks}
GUEST_ARCH=arm64 GUEST_DIR=$G GUEST_CMD_TIMEOUT=${GUEST_CMD_TIMEOUT:-5400} \
    "$REPO/guest/run.sh" "uname -m; GUEST_SCOPES=login GUEST_CHECKS='$checks' bash bed/guest/scenarios/drive.sh" \
    2>&1 | tee "$scenarios"
rc=${PIPESTATUS[0]}
echo
echo "===== arm64 guest summary (logs: $G/logs/; scenario output: $scenarios)"
"${PYTHON:-python3}" "$REPO/guest/scenarios/check.py" --summary "$scenarios"
summary_rc=$?
[ ! -f "$G/logs/build-times.txt" ] || echo "build: $(sed 's/s$/ s/' "$G/logs/build-times.txt" | paste -sd, | sed 's/,/, /g')"
grep -h '^\[guest-run\] \(boot:\|command\)' "$G"/logs/run-*.times | sed 's/^\[guest-run\] /run: /'
echo "arm64 guest wall time $((SECONDS - start)) s"
case $rc in
0) [ "$summary_rc" = 0 ] && exit 0 || exit 1 ;;
1) exit 1 ;;
*) echo "guest arm64: the guest run ended with $rc (124/125: no boot or no ssh; see the serial log)" >&2; exit 2 ;;
esac
}
