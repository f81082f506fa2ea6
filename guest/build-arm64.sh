#!/usr/bin/env bash
# Build a Debian 12 arm64 test guest for console-bridge (issue 34 item 4), for qemu-system-aarch64
# under TCG, on an x86-64 host WITHOUT binfmt_misc (registering qemu-user-static is a host kernel
# setting this project may not change): no arm64 program runs on the host, so nothing is
# installed by running dpkg. Every package is unpacked and configured from the host instead:
#
#   rootfs     debootstrap --foreign --arch=arm64: resolves and downloads the package set of
#              guest/build.sh (arm64 kernel), unpacks the required ones
#   unpack     every downloaded .deb unpacked onto the rootfs (dpkg-deb | tar, keeping merged-/usr
#              links), a dpkg status file written from their control fields
#   config     what the maintainer scripts would do and guest/build.sh's stage_config, done with
#              host tools on the folder: users (base-passwd's masters, systemd-sysusers --root,
#              sshd, alice uid 1000 with lingering), PAM common-* (pam_systemd in sessions),
#              sshd_config + host keys, alternatives (awk, which), systemctl --root preset-all,
#              systemd-networkd static address, depmod -b; ldconfig runs at the first boot
#   wheels     pip wheel/download on the host: cp311 manylinux aarch64 wheels
#   venv       ~alice/venv made on the host: pyvenv.cfg + links to the guest's /usr/bin/python3,
#              pip install --target --platform ..._aarch64 from the wheels, script shebangs
#              rewritten; the guest's stdlib and the venv byte-compiled by the host's Python 3.11
#              (same .pyc magic), so the guest never compiles under emulation
#   initramfs  a tiny initramfs: busybox-static (arm64 .deb) + the kernel's virtio/ext4/virtio_net
#              modules (dependencies read from each module's depends=); it mounts /dev/vda and
#              switch_roots to systemd. The kernel comes from the linux-image .deb.
#   image      ext4 image by mke2fs -d (no loop device, no mount)
#
#   guest/build-arm64.sh                  # every stage, in that order
#   guest/build-arm64.sh venv image       # only some stages
#   GUEST_ARCH=arm64 guest/run.sh 'console-bridge doctor'   # then boot it as guest/run.sh does
#   guest/ci-arm64.sh                     # build + boot + doctor, the CI analysis, the attacks
#
# Tried first and dropped: debootstrap --second-stage inside the VM (booted with this initramfs).
# Under TCG at nice 19 on a loaded 2-core host it did 21 of about 360 dpkg unpack/configure steps
# in 12 minutes: hours for the whole set.
#
# Everything goes to $GUEST_DIR (default <repo>/.guest-arm64; git ignores it). Needs root and the
# Debian packages debootstrap e2fsprogs qemu-system-arm cpio kmod (host depmod) systemd (host
# systemctl, systemd-sysusers) openssh-client. Timings: $GUEST_DIR/logs/build-times.txt.
# Environment: GUEST_DIR, MIRROR, PYTHON (host Python 3.11 with pip), IMAGE_SIZE (default 4G).
# Not part of CI (.ci/run): under TCG on this project's 2-core machines it is too slow.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
G=${GUEST_DIR:-$REPO/.guest-arm64}
ROOT=$G/rootfs
LOGS=$G/logs
PY=${PYTHON:-python3}
SUITE=bookworm
MIRROR=${MIRROR:-http://deb.debian.org/debian}
IMAGE_SIZE=${IMAGE_SIZE:-4G}
# the same package set as guest/build.sh, with the arm64 kernel; busybox-static for our initramfs
PACKAGES=linux-image-arm64,initramfs-tools,systemd,systemd-sysv,udev,kmod,dbus,dbus-user-session,libpam-systemd
PACKAGES+=,python3,python3-venv,libpython3.11-dev,openssh-server,sudo,procps,iproute2,busybox-static
PACKAGES+=${EXTRA_PACKAGES:+,$EXTRA_PACKAGES}
# modules the initramfs loads (with their dependencies): the disk, its file system, the NIC
MODULES=(virtio_mmio virtio_pci virtio_blk ext4 crc32c_generic virtio_net)

log() { printf '[guest-build-arm64 %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
fail_with() { log "FAILED: $1 (log: $2)"; tail -n 30 "$2" >&2; exit 1; }

kernel_deb() { ls "$G"/debs/linux-image-[0-9]*_arm64.deb | sort -V | tail -n 1; }

stage_rootfs() {
    log "debootstrap --foreign --arch=arm64 $SUITE (minbase + $PACKAGES) from $MIRROR"
    rm -rf "$ROOT"
    mkdir -p "$G/debs"
    debootstrap --foreign --variant=minbase --arch=arm64 --cache-dir="$G/debs" --include="$PACKAGES" \
        "$SUITE" "$ROOT" "$MIRROR" >"$LOGS/debootstrap-foreign.log" 2>&1 \
        || fail_with "debootstrap --foreign" "$LOGS/debootstrap-foreign.log"
}


stage_unpack() {
    local debs=("$ROOT"/var/cache/apt/archives/*.deb) deb
    log "unpacking ${#debs[@]} packages onto the rootfs (host dpkg-deb, no maintainer scripts)"
    rm -f "$ROOT/proc" && mkdir -p "$ROOT/proc"   # debootstrap --foreign leaves a link to the host's /proc
    : >"$ROOT/var/lib/dpkg/status.new"
    for deb in "${debs[@]}"; do
        dpkg-deb --fsys-tarfile "$deb" | tar -x --keep-directory-symlink -C "$ROOT" \
            || { log "FAILED: unpacking $deb"; exit 1; }
        { dpkg-deb -f "$deb" | awk 'NR == 1 { print; print "Status: install ok installed"; next } { print }'
            echo; } >>"$ROOT/var/lib/dpkg/status.new"
    done
    mv "$ROOT/var/lib/dpkg/status.new" "$ROOT/var/lib/dpkg/status"
    rm -rf "$ROOT/debootstrap" "$ROOT/setup"
    rm -f "$ROOT"/var/cache/apt/archives/*.deb   # (kept in $G/debs)
}

stage_config() {
    log "configuring the guest from the host (users, PAM, sshd, systemd units, network, modules)"
    local r=$ROOT ver
    echo guest >"$r/etc/hostname"
    printf '127.0.0.1 localhost\n127.0.1.1 guest\n' >"$r/etc/hosts"
    "$PY" -c 'import uuid; print(uuid.uuid4().hex)' >"$r/etc/machine-id"
    printf '/dev/vda / ext4 rw,errors=remount-ro 0 0\n' >"$r/etc/fstab"
    [ -e "$r/etc/nsswitch.conf" ] || cp "$r/usr/share/libc-bin/nsswitch.conf" "$r/etc/nsswitch.conf"
    rm -rf "$r/var/run" "$r/var/lock" && ln -s /run "$r/var/run" && ln -s /run/lock "$r/var/lock"
    # users: base-passwd's masters, then the system users of sysusers.d (systemd, dbus), sshd, alice
    cp "$r/usr/share/base-passwd/passwd.master" "$r/etc/passwd"
    cp "$r/usr/share/base-passwd/group.master" "$r/etc/group"
    sed -i 's/^\([^:]*\):\*:/\1:x:/' "$r/etc/passwd" "$r/etc/group"   # passwords in shadow (pwconv)
    rm -f "$r/etc/shadow" "$r/etc/gshadow"
    systemd-sysusers --root="$r" >"$LOGS/sysusers.log" 2>&1 || fail_with systemd-sysusers "$LOGS/sysusers.log"
    grep -q '^sshd:' "$r/etc/passwd" || echo 'sshd:x:101:65534::/run/sshd:/usr/sbin/nologin' >>"$r/etc/passwd"
    grep -q '^alice:' "$r/etc/passwd" || {
        echo 'alice:x:1000:1000::/home/alice:/bin/bash' >>"$r/etc/passwd"
        echo 'alice:x:1000:' >>"$r/etc/group"
    }
    awk -F: '{ printf "%s:*:19700:0:99999:7:::\n", $1 }' "$r/etc/passwd" >"$r/etc/shadow"
    awk -F: '{ printf "%s:*::\n", $1 }' "$r/etc/group" >"$r/etc/gshadow"
    chmod 640 "$r/etc/shadow" "$r/etc/gshadow" && chgrp 42 "$r/etc/shadow" "$r/etc/gshadow"   # group shadow
    [ -d "$r/home/alice" ] || cp -a "$r/etc/skel" "$r/home/alice"
    grep -q 'HOME/venv/bin' "$r/home/alice/.profile" || printf '\n# the console-bridge venv (guest/build-arm64.sh)\nPATH="$HOME/venv/bin:$PATH"\n' >>"$r/home/alice/.profile"
    mkdir -p "$r/var/lib/systemd/linger" && touch "$r/var/lib/systemd/linger/alice"
    # base-files' own folders (its install script never ran here): the root checks plant a root-only file in /opt
    for dir in opt srv mnt media; do [ -d "$r/$dir" ] || install -d -m 755 "$r/$dir"; done
    mkdir -p "$G/ssh"
    [ -f "$G/ssh/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C console-bridge-guest -f "$G/ssh/id_ed25519"
    local home
    for home in home/alice root; do   # root's key only powers the guest off and reads the journal
        install -d -m 700 "$r/$home/.ssh"
        install -m 600 "$G/ssh/id_ed25519.pub" "$r/$home/.ssh/authorized_keys"
    done
    chown -R 1000:1000 "$r/home/alice" && chmod 755 "$r/home/alice"
    # PAM: what pam-auth-update makes from pam-configs unix + systemd (pam_systemd: login sessions)
    printf 'auth\t[success=1 default=ignore]\tpam_unix.so nullok\nauth\trequisite\tpam_deny.so\nauth\trequired\tpam_permit.so\n' \
        >"$r/etc/pam.d/common-auth"
    printf 'account\t[success=1 new_authtok_reqd=done default=ignore]\tpam_unix.so\naccount\trequisite\tpam_deny.so\naccount\trequired\tpam_permit.so\n' \
        >"$r/etc/pam.d/common-account"
    printf 'password\t[success=1 default=ignore]\tpam_unix.so obscure yescrypt\npassword\trequisite\tpam_deny.so\npassword\trequired\tpam_permit.so\n' \
        >"$r/etc/pam.d/common-password"
    local session='session\t[default=1]\tpam_permit.so\nsession\trequisite\tpam_deny.so\nsession\trequired\tpam_permit.so\nsession\trequired\tpam_unix.so\n'
    printf "$session"'session\toptional\tpam_systemd.so\n' >"$r/etc/pam.d/common-session"
    printf "$session" >"$r/etc/pam.d/common-session-noninteractive"
    # sshd: the config its postinst installs, host keys, key login only
    [ -e "$r/etc/ssh/sshd_config" ] || cp "$r/usr/share/openssh/sshd_config" "$r/etc/ssh/sshd_config"
    ssh-keygen -A -f "$r" >/dev/null
    # (MaxStartups: under TCG one unauthenticated connection takes sshd tens of seconds, and run.sh's
    # polling during the boot otherwise fills the default 10 with "Exceeded MaxStartups")
    printf 'PasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nUseDNS no\nMaxStartups 100\n' \
        >"$r/etc/ssh/sshd_config.d/guest.conf"
    # alternatives the maintainer scripts would set
    mkdir -p "$r/etc/alternatives"
    ln -sfn /usr/bin/mawk "$r/etc/alternatives/awk" && ln -sfn /etc/alternatives/awk "$r/usr/bin/awk"
    ln -sfn /usr/bin/which.debianutils "$r/etc/alternatives/which" && ln -sfn /etc/alternatives/which "$r/usr/bin/which"
    # systemd: Debian's presets (everything enabled), then the same units as guest/build.sh
    printf '[Match]\nName=en* eth*\n\n[Network]\nAddress=10.0.2.15/24\nLinkLocalAddressing=no\nIPv6AcceptRA=no\n' \
        >"$r/etc/systemd/network/50-slirp.network"
    { export SYSTEMCTL_SKIP_SYSV=1   # (its SysV sync would run the guest's update-rc.d by chroot)
        systemctl --root="$r" preset-all &&
        systemctl --root="$r" enable systemd-networkd.service ssh.service &&
        systemctl --root="$r" mask systemd-networkd-wait-online.service apt-daily.timer apt-daily-upgrade.timer \
            dpkg-db-backup.timer e2scrub_all.timer fstrim.timer systemd-timesyncd.service e2scrub_reap.service; } >"$LOGS/systemctl.log" 2>&1 \
        || fail_with "systemctl --root" "$LOGS/systemctl.log"
    ver=$(ls "$r/lib/modules")
    depmod -b "$r" "$ver" >"$LOGS/depmod.log" 2>&1 || fail_with depmod "$LOGS/depmod.log"
}

stage_wheels() {
    log "wheels for console-bridge + runtime dependencies (cp311 manylinux aarch64) into $G/wheels"
    rm -rf "$G/wheels" && mkdir -p "$G/wheels"
    local platforms=(--platform manylinux2014_aarch64) v
    for v in $(seq 17 36); do platforms+=(--platform "manylinux_2_${v}_aarch64"); done   # bookworm: glibc 2.36
    export PIP_CACHE_DIR=$G/cache/pip PIP_DISABLE_PIP_VERSION_CHECK=1
    { "$PY" -m pip wheel -q --no-deps -w "$G/wheels" "$REPO" &&
        "$PY" -m pip download -q --only-binary=:all: --python-version 3.11 --implementation cp --abi cp311 \
            "${platforms[@]}" -d "$G/wheels" "$(ls "$G"/wheels/console_bridge-*.whl)" "mcp-console[client]==0.0.6" pip
    } >"$LOGS/wheels.log" 2>&1 || fail_with "pip wheel/download" "$LOGS/wheels.log"
    log "$(find "$G/wheels" -name '*.whl' | wc -l) wheels, $(du -sh "$G/wheels" | cut -f1)"
}

stage_venv() {
    log "~alice/venv on the host: pip install --target --platform aarch64 from the wheels; byte-compiling"
    local v=$ROOT/home/alice/venv sp pyver
    pyver=$(ls "$ROOT"/var/lib/dpkg/status >/dev/null && awk '/^Package: python3.11-minimal$/ { p = 1 } p && /^Version:/ { print $2; exit }' \
        "$ROOT/var/lib/dpkg/status")
    rm -rf "$v" && mkdir -p "$v/bin" "$v/include" "$v/lib/python3.11/site-packages"
    ln -s lib "$v/lib64"
    sp=$v/lib/python3.11/site-packages
    printf 'home = /usr/bin\ninclude-system-site-packages = false\nversion = %s\nexecutable = /usr/bin/python3.11\ncommand = /usr/bin/python3 -m venv /home/alice/venv\n' \
        "${pyver%%-*}" >"$v/pyvenv.cfg"
    ln -s /usr/bin/python3 "$v/bin/python" && ln -s python "$v/bin/python3" && ln -s python "$v/bin/python3.11"
    local platforms=(--platform manylinux2014_aarch64) n
    for n in $(seq 17 36); do platforms+=(--platform "manylinux_2_${n}_aarch64"); done
    local t; t=$(mktemp -d "$G/venv-target.XXXXXX")
    PIP_DISABLE_PIP_VERSION_CHECK=1 "$PY" -m pip install -q --no-index --find-links "$G/wheels" --target "$t" \
        --only-binary=:all: --python-version 3.11 --implementation cp --abi cp311 "${platforms[@]}" \
        console-bridge "mcp-console[client]==0.0.6" pip >"$LOGS/venv.log" 2>&1 || fail_with "pip install --target" "$LOGS/venv.log"
    local f
    for f in "$t"/bin/*; do   # console scripts: the host Python in their shebang -> the venv's
        if head -c 2 "$f" | grep -q '#!' && head -n 1 "$f" | grep -q python; then
            sed -i '1s|^#!.*|#!/home/alice/venv/bin/python|' "$f"
        fi
        mv "$f" "$v/bin/"
    done
    rmdir "$t/bin"
    # the wheels' data files (mcp-console's libexec/bwrap and libexec/mcp-console-sandbox, which it
    # looks for next to its bin/): --target leaves them in the target, the venv's prefix is their place
    for f in "$t"/*; do
        case ${f##*/} in libexec | share | include | etc) cp -a "$f" "$v/" && rm -rf "$f" ;; esac
    done
    cp -a "$t"/. "$sp"/ && rm -rf "$t"
    # byte-compile the guest's stdlib and the venv with the host's 3.11 (the .pyc magic is per 3.11)
    nice -n 19 "$PY" -m compileall -q -j 2 -s "$ROOT" -p / "$ROOT/usr/lib/python3.11" "$sp" >"$LOGS/compileall.log" 2>&1 || true
    chown -R 1000:1000 "$v"
    "$PY" -m pip list --path "$sp" --format freeze 2>/dev/null >"$LOGS/guest-venv-freeze.txt" || true
    log "venv: $(wc -l <"$LOGS/guest-venv-freeze.txt") distributions"
}

module_closure() {   # module names -> their .ko paths (relative to lib/modules/VER), dependencies first
    local dir=$1 seen=" " out=()
    shift
    visit() {
        local name=$1 ko deps d
        case $seen in *" $name "*) return ;; esac
        seen+="$name "
        ko=$(cd "$dir" && find kernel -name "$name.ko" -o -name "${name//_/-}.ko" | head -n 1)
        if [ -z "$ko" ]; then   # built in (or absent: then insmod is not needed either)
            grep -q "/${name}.ko\$" "$dir/modules.builtin" || log "module $name: neither a .ko nor built in"
            return
        fi
        deps=$(strings "$dir/$ko" | sed -n 's/^depends=//p' | head -n 1)
        for d in ${deps//,/ }; do visit "$d"; done
        out+=("$ko")
    }
    local m
    for m in "$@"; do visit "$m"; done
    printf '%s\n' "${out[@]}"
}

stage_initramfs() {
    log "initramfs: busybox-static + $(printf '%s ' "${MODULES[@]}")and their dependencies"
    local k=$G/kernel b=$G/busybox i=$G/initramfs ver
    rm -rf "$k" "$b" "$i" && mkdir -p "$k" "$b" "$i"/{bin,dev,proc,sys,newroot}
    dpkg-deb -x "$(kernel_deb)" "$k"
    dpkg-deb -x "$(ls "$G"/debs/busybox-static_*_arm64.deb | tail -n 1)" "$b"
    ver=$(ls "$k/lib/modules")
    cp "$k/boot/vmlinuz-$ver" "$G/vmlinuz"
    cp "$b/bin/busybox" "$i/bin/busybox"
    local ko
    mkdir -p "$i/modules"
    module_closure "$k/lib/modules/$ver" "${MODULES[@]}" >"$i/modules/order"
    while read -r ko; do cp "$k/lib/modules/$ver/$ko" "$i/modules/"; done <"$i/modules/order"
    sed -i 's,.*/,,' "$i/modules/order"
    cat >"$i/init" <<'EOF'
#!/bin/busybox sh
# console-bridge arm64 guest (guest/build-arm64.sh): load the disk's and the NIC's modules, mount
# /dev/vda (root= of the command line is not read: always /dev/vda) and hand over to systemd.
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc; mount -t sysfs sysfs /sys; mount -t devtmpfs devtmpfs /dev
for m in $(cat /modules/order); do insmod "/modules/$m" || echo "initramfs: insmod $m failed"; done
for _ in $(seq 60); do [ -b /dev/vda ] && break; sleep 1; done
mount -t ext4 -o rw /dev/vda /newroot || { echo "initramfs: cannot mount /dev/vda"; sleep 5; poweroff -f; }
umount /proc /sys
mount --move /dev /newroot/dev
exec switch_root /newroot /sbin/init
EOF
    chmod 755 "$i/init"
    (cd "$i" && find . | cpio -o -H newc --quiet | gzip -1) >"$G/initrd.img"
    log "kernel $ver; modules: $(paste -sd' ' "$i/modules/order")"
}

stage_image() {
    log "ext4 image ($IMAGE_SIZE, sparse) from the rootfs by mke2fs -d"
    rm -f "$G/image.raw"
    mke2fs -q -t ext4 -L guestroot -d "$ROOT" "$G/image.raw" "$IMAGE_SIZE" >"$LOGS/image.log" 2>&1 \
        || fail_with mke2fs "$LOGS/image.log"
    log "image $G/image.raw ($(du -h "$G/image.raw" | cut -f1) used)"
}

main() {
    [ "$(id -u)" = 0 ] || { echo "guest/build-arm64.sh: run as root (debootstrap)" >&2; exit 1; }
    local stages=("$@") s t
    [ ${#stages[@]} -gt 0 ] || stages=(rootfs unpack config wheels venv initramfs image)
    mkdir -p "$LOGS"
    for s in "${stages[@]}"; do
        declare -F "stage_$s" >/dev/null || { echo "guest/build-arm64.sh: unknown stage $s" >&2; exit 2; }
        t=$SECONDS
        "stage_$s"
        printf '%s %ss\n' "$s" $((SECONDS - t)) | tee -a "$LOGS/build-times.txt" >&2
    done
}
main "$@"; exit   # one line: bash has read it all before it runs, so editing this file mid-build is safe
