#!/usr/bin/env bash
# Build the Debian 12 test guest for console-bridge, from scratch, inside the clone.
#
#   guest/build.sh                 # every stage: rootfs config wheels venv image
#   guest/build.sh venv image      # only some stages, in this order (e.g. after changing the code:
#                                  # reinstall the project wheel into the rootfs, remake the image)
#
# Everything goes to $GUEST_DIR (default <repo>/.guest; git ignores it); nothing is cached
# outside the clone. Needs root and the Debian packages debootstrap qemu-utils e2fsprogs
# (qemu-system-x86 to boot it: guest/run.sh). Timings go to .guest/logs/build-times.txt.
#
# The guest: bookworm (minbase) + systemd as PID 1 (cgroup v2 only), dbus, dbus-user-session,
# libpam-systemd, python3 3.11 + venv + libpython3.11-dev (mcp-console embeds libpython3.11.so),
# openssh-server, sudo; user alice (uid 1000, no sudo) with lingering, so user@1000.service runs
# from boot; ~alice/venv holds console-bridge + its runtime dependencies, installed by chroot from
# wheels downloaded on the host (cp311, manylinux x86_64). Network: none but the ssh port that
# run.sh forwards from 127.0.0.1.
# Environment: GUEST_DIR, MIRROR (default: this host's apt mirror), PYTHON (host python with pip),
# EXTRA_PACKAGES (more Debian packages, comma-separated), IMAGE_SIZE (default 4G).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
G=${GUEST_DIR:-$REPO/.guest}
ROOT=$G/rootfs
LOGS=$G/logs
PY=${PYTHON:-python3}
SUITE=bookworm
apt_mirror() {
    { cat /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null || true; } |
        awk '/^URIs:/ {print $2} /^deb / {print $2}' | awk '!/security/ {print; exit}'
}
MIRROR=${MIRROR:-$(apt_mirror)}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
IMAGE_SIZE=${IMAGE_SIZE:-4G}
PACKAGES=linux-image-amd64,initramfs-tools,systemd,systemd-sysv,udev,kmod,dbus,dbus-user-session,libpam-systemd
PACKAGES+=,python3,python3-venv,libpython3.11-dev,openssh-server,sudo,procps,iproute2
PACKAGES+=${EXTRA_PACKAGES:+,$EXTRA_PACKAGES}

log() { printf '[guest-build %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
fail_with() { log "FAILED: $1 (log: $2)"; tail -n 30 "$2" >&2; exit 1; }
in_root() { chroot "$ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "$@"; }
MOUNTS=(proc sys dev dev/pts)
mount_chroot() {
    mountpoint -q "$ROOT/proc" || mount -t proc proc "$ROOT/proc"
    mountpoint -q "$ROOT/sys" || mount -t sysfs sysfs "$ROOT/sys"
    mountpoint -q "$ROOT/dev" || mount --bind /dev "$ROOT/dev"
    mountpoint -q "$ROOT/dev/pts" || mount --bind /dev/pts "$ROOT/dev/pts"
}
umount_chroot() {
    local i
    for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do
        if mountpoint -q "$ROOT/${MOUNTS[i]}"; then umount "$ROOT/${MOUNTS[i]}" || umount -l "$ROOT/${MOUNTS[i]}"; fi
    done
}
trap umount_chroot EXIT

stage_rootfs() {
    log "debootstrap $SUITE (minbase + $PACKAGES) from $MIRROR"
    umount_chroot
    rm -rf "$ROOT"
    mkdir -p "$G/debs"
    debootstrap --variant=minbase --arch=amd64 --cache-dir="$G/debs" --include="$PACKAGES" \
        "$SUITE" "$ROOT" "$MIRROR" >"$LOGS/debootstrap.log" 2>&1 || fail_with debootstrap "$LOGS/debootstrap.log"
    umount_chroot   # debootstrap can leave proc/sys mounted when it fails half-way
}

stage_config() {
    log "configuring the guest (alice, sshd, network, boot)"
    echo guest >"$ROOT/etc/hostname"
    printf '127.0.0.1 localhost\n127.0.1.1 guest\n' >"$ROOT/etc/hosts"
    # A fixed machine id: every -snapshot boot is the same machine, never a "first boot".
    "$PY" -c 'import uuid; print(uuid.uuid4().hex)' >"$ROOT/etc/machine-id"
    printf '/dev/vda / ext4 rw,errors=remount-ro 0 0\n' >"$ROOT/etc/fstab"
    # The slirp NIC (qemu runs it with restrict=on: nothing outside is reachable; the host reaches
    # sshd through a hostfwd on 127.0.0.1). A static address: no DHCP wait at boot.
    printf '[Match]\nName=en* eth*\n\n[Network]\nAddress=10.0.2.15/24\nLinkLocalAddressing=no\nIPv6AcceptRA=no\n' \
        >"$ROOT/etc/systemd/network/50-slirp.network"
    in_root systemctl enable systemd-networkd.service >/dev/null 2>&1
    in_root systemctl mask systemd-networkd-wait-online.service apt-daily.timer apt-daily-upgrade.timer \
        dpkg-db-backup.timer e2scrub_all.timer fstrim.timer systemd-timesyncd.service >/dev/null 2>&1 || true

    # alice: an ordinary user (no sudo), key login only, lingering (user@1000.service from boot).
    in_root id alice >/dev/null 2>&1 || in_root useradd -m -u 1000 -U -s /bin/bash alice
    in_root usermod -p '*' alice
    grep -q 'HOME/venv/bin' "$ROOT/home/alice/.profile" \
        || printf '\n# the console-bridge venv (guest/build.sh)\nPATH="$HOME/venv/bin:$PATH"\n' >>"$ROOT/home/alice/.profile"
    mkdir -p "$ROOT/var/lib/systemd/linger" && touch "$ROOT/var/lib/systemd/linger/alice"
    mkdir -p "$G/ssh"
    [ -f "$G/ssh/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C console-bridge-guest -f "$G/ssh/id_ed25519"
    for home in home/alice root; do   # root's key only powers the guest off and reads the journal
        install -d -m 700 "$ROOT/$home/.ssh"
        install -m 600 "$G/ssh/id_ed25519.pub" "$ROOT/$home/.ssh/authorized_keys"
    done
    in_root chown -R alice:alice /home/alice
    printf 'PasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nUseDNS no\n' \
        >"$ROOT/etc/ssh/sshd_config.d/guest.conf"
    [ -f "$ROOT/etc/ssh/ssh_host_ed25519_key" ] || in_root ssh-keygen -A
}

build_requires() {   # the [build-system] requires of the project (one line: hatchling>=1.25)
    "$PY" -c 'import sys, tomllib; print(*tomllib.load(open(sys.argv[1], "rb"))["build-system"]["requires"])' \
        "$REPO/pyproject.toml"
}

stage_wheels() {
    log "wheels for console-bridge + runtime dependencies (cp311 manylinux x86_64) into $G/wheels"
    rm -rf "$G/wheels" && mkdir -p "$G/wheels"
    local platforms=(--platform manylinux2014_x86_64) v
    for v in $(seq 17 36); do platforms+=(--platform "manylinux_2_${v}_x86_64"); done   # bookworm: glibc 2.36
    export PIP_CACHE_DIR=$G/cache/pip PIP_DISABLE_PIP_VERSION_CHECK=1
    { "$PY" -m pip wheel -q --no-deps -w "$G/wheels" "$REPO" &&
        "$PY" -m pip download -q --only-binary=:all: --python-version 3.11 --implementation cp --abi cp311 \
            "${platforms[@]}" -d "$G/wheels" "$(ls "$G"/wheels/console_bridge-*.whl)[jupyter]" "mcp-console[client]==0.0.6" \
            nbclient &&
        # the build backend too: the CI example (scenarios/ci-example.sh) pip-installs the checkout
        # itself in the guest, with no index (PIP_NO_INDEX, PIP_FIND_LINKS=these wheels)
        "$PY" -m pip download -q --only-binary=:all: --python-version 3.11 --implementation cp --abi cp311 \
            "${platforms[@]}" -d "$G/wheels" $(build_requires)   # (word-split on purpose: one requirement each)
    } >"$LOGS/wheels.log" 2>&1 || fail_with "pip wheel/download" "$LOGS/wheels.log"
    log "$(find "$G/wheels" -name '*.whl' | wc -l) wheels, $(du -sh "$G/wheels" | cut -f1)"
}

stage_venv() {
    mount_chroot
    rm -rf "$ROOT/var/tmp/wheels" && cp -r "$G/wheels" "$ROOT/var/tmp/wheels" && chmod -R a+rX "$ROOT/var/tmp/wheels"
    local pip=(in_root runuser -u alice -- /home/alice/venv/bin/pip install -q --disable-pip-version-check --no-index)
    if [ -x "$ROOT/home/alice/venv/bin/console-bridge" ]; then
        log "reinstalling only the project wheel into ~alice/venv (chroot), then any dependency it now lacks"
        local wheel   # the path inside the chroot (a glob here would be matched on the host)
        wheel=/var/tmp/wheels/$(basename "$(ls "$G"/wheels/console_bridge-*.whl)")
        { "${pip[@]}" --no-deps --force-reinstall "$wheel" \
            && "${pip[@]}" --find-links /var/tmp/wheels "$wheel[jupyter]" nbclient; } \
            >"$LOGS/venv.log" 2>&1 \
            || fail_with "pip install (project)" "$LOGS/venv.log"
    else
        log "~alice/venv: console-bridge + dependencies from the wheels (chroot, no index)"
        in_root runuser -u alice -- python3 -m venv /home/alice/venv
        "${pip[@]}" --find-links /var/tmp/wheels "console-bridge[jupyter]" "mcp-console[client]==0.0.6" nbclient \
            >"$LOGS/venv.log" 2>&1 \
            || fail_with "pip install" "$LOGS/venv.log"
    fi
    rm -rf "$ROOT/var/tmp/wheels"
    in_root runuser -u alice -- /home/alice/venv/bin/pip freeze --disable-pip-version-check >"$LOGS/guest-venv-freeze.txt"
    umount_chroot
}

stage_image() {
    log "kernel + initrd out, ext4 image from the rootfs ($IMAGE_SIZE, sparse)"
    umount_chroot   # mke2fs -d must not copy /proc, /sys, /dev
    local kernel
    kernel=$(ls "$ROOT"/boot/vmlinuz-* | sort -V | tail -n 1)
    cp "$kernel" "$G/vmlinuz"
    cp "$ROOT/boot/initrd.img-${kernel##*/vmlinuz-}" "$G/initrd.img"
    rm -f "$G/image.raw"
    # mke2fs -d fills the file system from the folder: no loop device, no mount on the host.
    mke2fs -q -t ext4 -L guestroot -d "$ROOT" "$G/image.raw" "$IMAGE_SIZE" >"$LOGS/image.log" 2>&1 \
        || fail_with mke2fs "$LOGS/image.log"
    log "image $G/image.raw ($(du -h "$G/image.raw" | cut -f1) used), kernel ${kernel##*/vmlinuz-}"
}

main() {
    [ "$(id -u)" = 0 ] || { echo "guest/build.sh: run as root (debootstrap, chroot)" >&2; exit 1; }
    local stages=("$@") s t
    [ ${#stages[@]} -gt 0 ] || stages=(rootfs config wheels venv image)
    mkdir -p "$LOGS"
    for s in "${stages[@]}"; do
        declare -F "stage_$s" >/dev/null || { echo "guest/build.sh: unknown stage $s" >&2; exit 2; }
        t=$SECONDS
        "stage_$s"
        printf '%s %ss\n' "$s" $((SECONDS - t)) | tee -a "$LOGS/build-times.txt" >&2
    done
}
main "$@"; exit   # one line: bash has read it all before it runs, so editing this file mid-build is safe
