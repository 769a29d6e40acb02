#!/bin/busybox sh
# /init of the tiny test guest (copied into the initramfs by build-tiny-image.sh).
#
# It does what cloud-init's NoCloud source does, in miniature: find the config
# drive labelled cidata, read instance-id and local-hostname from meta-data, set
# the hostname, and say so on the serial console with the marker line that tests
# wait for. Kernel parameter novakit.poweroff makes it power off after the marker.
# If user-data holds an admin password hash (SHA-512 crypt, as novakit writes it
# for root's chpasswd entry), it prints NOVAKIT-GUEST-ADMIN-PASSWORD with the
# sha256 of the hash string before the marker: proof of what it got, which shows
# neither the password nor its hash. The last hash counts, as for cloud-init,
# which sets passwords in order.
/bin/busybox --install -s /bin
export PATH=/bin:/sbin

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
say() { echo "novakit-init: $*"; }

for m in $(cat /etc/modules); do
    modprobe "$m" 2>/dev/null || say "module $m not loaded"
done

# The config drive: by label first, then any disk or cdrom holding meta-data.
find_drive() {
    dev=$(findfs LABEL=cidata 2>/dev/null) && { echo "$dev"; return 0; }
    for dev in /dev/vd? /dev/sr? /dev/sd?; do
        [ -b "$dev" ] || continue
        if mount -t iso9660 -o ro "$dev" /mnt 2>/dev/null; then
            if [ -f /mnt/meta-data ]; then umount /mnt; echo "$dev"; return 0; fi
            umount /mnt
        fi
    done
    return 1
}

# meta-data is YAML written by novakit: "key: value", the value maybe in double quotes.
meta() {
    sed -n "s/^$1: *//p" /mnt/meta-data | head -n 1 | sed 's/^"\(.*\)"$/\1/'
}

hostname_value=localhost
instance_id=none
admin_hash=""
tries=0
drive=""
while [ $tries -lt 50 ]; do
    drive=$(find_drive) && break
    tries=$((tries + 1))
    sleep 0.1
done
if [ -n "$drive" ] && mount -t iso9660 -o ro "$drive" /mnt; then
    say "config drive cidata found on $drive"
    instance_id=$(meta instance-id)
    h=$(meta local-hostname)
    [ -n "$h" ] && hostname_value=$h
    if [ -f /mnt/user-data ]; then
        admin_hash=$(grep -oE '\$6\$(rounds=[0-9]+\$)?[./0-9A-Za-z]{1,16}\$[./0-9A-Za-z]{86}' /mnt/user-data | tail -n 1)
    fi
    umount /mnt
else
    say "no config drive"
fi
hostname "$hostname_value"
say "hostname $(hostname)"

acpid -c /etc/acpi -l /dev/null 2>/dev/null || say "acpid not started"

if [ -n "$admin_hash" ]; then
    echo "NOVAKIT-GUEST-ADMIN-PASSWORD sha256=$(printf %s "$admin_hash" | sha256sum | cut -d' ' -f1)"
fi
echo "NOVAKIT-GUEST-READY hostname=$(hostname) instance-id=$instance_id"

if grep -qw novakit.poweroff /proc/cmdline; then
    sync
    poweroff -f
fi

# Addresses come after the marker so that they never delay it.
if [ -e /sys/class/net/eth0 ]; then
    ip link set lo up
    ip link set eth0 up
    udhcpc -i eth0 -q -n -t 5 -T 1 -s /usr/share/udhcpc/default.script >/dev/null 2>&1 &
fi

while :; do
    sleep 3600
done
