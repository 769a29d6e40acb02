#!/bin/sh
# Build the tiny test guest: a Debian cloud kernel and a busybox initramfs.
#
#   tests/images/build-tiny-image.sh [OUTPUT_DIR]     (default ./.state/tiny-image)
#
# Outputs, with their sha256 in SHA256SUMS:
#   vmlinuz      the kernel of Debian's linux-image-cloud-amd64 (direct kernel boot)
#   initrd.img   busybox + a few kernel modules + /init (tests/images/tiny-init.sh)
#   root.qcow2   an empty 64 MiB qcow2 disk: the guest's "image", so that a boot goes
#                through the image cache and a copy-on-write overlay like any other
#   cmdline      the kernel command line to boot it with (image property os_command_line)
#   kernel-version
#
# At boot /init finds the config drive (label cidata), sets the hostname from its
# meta-data and prints "NOVAKIT-GUEST-READY hostname=<h> instance-id=<id>" on
# ttyS0 (after "NOVAKIT-GUEST-ADMIN-PASSWORD sha256=<sha256 of the hash>" when its
# user-data sets an admin password; with " addresses=IP/prefix,..." appended when its
# network-config gives NICs static addresses, which it applies); it powers off on an ACPI power button press,
# so graceful shutdown and soft reboot work.
#
# Runs offline apart from Debian's own package archive (apt-get download); as
# root it installs what is missing (busybox-static cpio qemu-utils). Idempotent:
# when every output exists and matches SHA256SUMS, and init.sha256 says the image
# was built from the tiny-init.sh of this checkout, it does nothing.
# NOVAKIT_TINY_KERNEL_PACKAGE=linux-image-<version>-cloud-amd64 pins the kernel.
set -eu

HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-./.state/tiny-image}
OUTPUTS="vmlinuz initrd.img root.qcow2 cmdline kernel-version"
# virtio disks (the config drive and root disk), the cdrom/iso9660 driver, the
# ACPI power button (graceful shutdown) and virtio-net (DHCP for address tests).
MODULES="virtio_pci virtio_blk isofs button evdev virtio_net"

log() { echo "build-tiny-image: $*" >&2; }

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
# An image built from another /init is out of date, whatever its checksums say.
INIT_SUM=$(sha256sum "$HERE/tiny-init.sh" | cut -d' ' -f1)

if [ -s "$OUT/SHA256SUMS" ] && (cd "$OUT" && sha256sum --quiet -c SHA256SUMS >/dev/null 2>&1) &&
    [ "$(cat "$OUT/init.sha256" 2>/dev/null)" = "$INIT_SUM" ]; then
    all=1
    for f in $OUTPUTS; do [ -e "$OUT/$f" ] || all=0; done
    if [ $all = 1 ]; then
        log "up to date in $OUT"
        exit 0
    fi
fi

need=""
# The initramfs needs a static busybox (the dynamic one would need libc inside).
if ! { [ -x /bin/busybox ] && /bin/busybox --list | grep -qx depmod && ! ldd /bin/busybox >/dev/null 2>&1; }; then
    need="$need busybox-static"
fi
command -v cpio >/dev/null 2>&1 || need="$need cpio"
command -v qemu-img >/dev/null 2>&1 || need="$need qemu-utils"
if [ -n "$need" ]; then
    if [ "$(id -u)" != 0 ]; then
        log "missing packages:$need (install them, or run as root)"
        exit 1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q $need
fi
BUSYBOX=/bin/busybox

WORK=$(mktemp -d "$OUT/.work.XXXXXX")
trap 'rm -rf "$WORK"' EXIT INT TERM

pkg=${NOVAKIT_TINY_KERNEL_PACKAGE:-}
if [ -z "$pkg" ]; then
    pkg=$(apt-cache depends linux-image-cloud-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
fi
if [ -z "$pkg" ]; then
    log "cannot find linux-image-cloud-amd64 in the apt cache; run apt-get update first"
    exit 1
fi
log "kernel package $pkg"
(cd "$WORK" && apt-get download -q "$pkg" >/dev/null 2>&1) || {
    # apt's sandbox user cannot write to root-only directories; retry where it can.
    chmod 0777 "$WORK"
    (cd "$WORK" && apt-get download -q "$pkg")
}
dpkg-deb -x "$WORK"/"$pkg"_*.deb "$WORK/kernel"
kver=$(ls "$WORK/kernel/lib/modules")
"$BUSYBOX" depmod -b "$WORK/kernel" "$kver"
moddir="$WORK/kernel/lib/modules/$kver"

# The initramfs tree.
root="$WORK/root"
mkdir -p "$root/bin" "$root/sbin" "$root/etc/acpi/PWRF" "$root/proc" "$root/sys" "$root/dev" \
    "$root/mnt" "$root/tmp" "$root/run" "$root/usr/share/udhcpc" "$root/lib/modules/$kver"
cp "$BUSYBOX" "$root/bin/busybox"
cp "$HERE/tiny-init.sh" "$root/init"
chmod 0755 "$root/init"

# Each wanted module with everything modules.dep says it needs.
deps=$(for m in $MODULES; do
    awk -v m="$m" -F': *' '{ n = $1; sub(/.*\//, "", n); sub(/\.ko$/, "", n); gsub(/-/, "_", n) }
        n == m { print $1; if ($2 != "") print $2 }' "$moddir/modules.dep"
done | tr ' ' '\n' | sort -u)
for rel in $deps; do
    mkdir -p "$root/lib/modules/$kver/$(dirname "$rel")"
    cp "$moddir/$rel" "$root/lib/modules/$kver/$rel"
done
"$BUSYBOX" depmod -b "$root" "$kver"
echo "$MODULES" > "$root/etc/modules"

# busybox acpid runs the executable named after the event: the power button powers off.
printf '#!/bin/sh\necho "novakit-init: power button, powering off"\nsync\npoweroff -f\n' \
    > "$root/etc/acpi/PWRF/00000080"
chmod 0755 "$root/etc/acpi/PWRF/00000080"
cat > "$root/usr/share/udhcpc/default.script" <<'EOF'
#!/bin/sh
# udhcpc hands the lease over in the environment; only an address is needed.
case "$1" in
    bound|renew) ip addr add "$ip/${mask:-24}" dev "$interface" && echo "novakit-init: $interface $ip" ;;
esac
EOF
chmod 0755 "$root/usr/share/udhcpc/default.script"

(cd "$root" && find . | cpio -o -H newc --quiet | gzip -9) > "$WORK/initrd.img"
cp "$WORK/kernel/boot/vmlinuz-$kver" "$WORK/vmlinuz"
qemu-img create -q -f qcow2 "$WORK/root.qcow2" 64M
echo "console=ttyS0 quiet panic=-1" > "$WORK/cmdline"
echo "$kver" > "$WORK/kernel-version"

for f in $OUTPUTS; do
    mv -f "$WORK/$f" "$OUT/$f"
done
(cd "$OUT" && sha256sum $OUTPUTS > SHA256SUMS.tmp && mv -f SHA256SUMS.tmp SHA256SUMS)
echo "$INIT_SUM" > "$OUT/init.sha256"
log "built $OUT ($kver)"
