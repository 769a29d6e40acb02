#!/bin/busybox sh
# /init of the tiny test guest (copied into the initramfs by build-tiny-image.sh).
#
# It does what cloud-init's NoCloud source does, in miniature: find the config
# drive labelled cidata, read instance-id and local-hostname from meta-data, set
# the hostname, and say so on the serial console with the marker line that tests
# wait for. Kernel parameter novakit.poweroff makes it power off after the marker.
# NICs whose MAC has fixed addresses in network-config get them statically (and the
# default route), listed in the marker as addresses=IP/prefix,...; the others keep DHCP.
# If user-data holds an admin password hash (SHA-512 crypt, as novakit writes it
# for root's chpasswd entry), it prints NOVAKIT-GUEST-ADMIN-PASSWORD with the
# sha256 of the hash string before the marker: proof of what it got, which shows
# neither the password nor its hash. The last hash counts, as for cloud-init,
# which sets passwords in order.
# If meta_data.json carries the server's key pair (Nova's "public_keys"), the marker
# ends with key=<fingerprint>: the MD5 of the key's base64-decoded data as colon-hex
# pairs, as Nova (and ssh-keygen -E md5) fingerprint it.
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

# --- static network (novakit ports) -----------------------------------------------------
# network-config is novakit's own JSON (version 2, json.dumps with indent): each NIC's
# "macaddress", its "IP/prefix" addresses and its default route's "via" sit on lines of
# their own, so awk turns it into "mac M", "addr A", "gw G" lines. meta_data.json's
# "novakit.ping" (digits and dots only) names an address to ping after the marker.
net_conf=""
key_fp=""
ping_target=""
static_addrs=""
static_ifaces=""
read_network_config() {
    [ -f /mnt/network-config ] && net_conf=$(awk -F'"' '
        /"macaddress":/ { print "mac " tolower($4) }
        /^ *"[0-9.]+\/[0-9]+",?$/ { print "addr " $2 }
        /"via":/ { print "gw " $4 }' /mnt/network-config)
    [ -f /mnt/meta_data.json ] && ping_target=$(sed -n \
        's/^ *"novakit\.ping": *"\([0-9.]*\)",\{0,1\}$/\1/p' /mnt/meta_data.json | head -n 1)
    return 0
}
# meta_data.json is json.dumps with indent 2: "public_keys" opens at two spaces, each key
# "name": "TYPE BASE64 COMMENT" sits on a line of its own (names hold no quotes). The first counts.
read_public_key() {
    [ -f /mnt/meta_data.json ] || return 0
    key_b64=$(awk -F'"' '
        /^  "public_keys": \{/ { inside = 1; next }
        inside && /^  \}/ { exit }
        inside && NF >= 4 { split($4, part, " "); print part[2]; exit }' /mnt/meta_data.json)
    [ -n "$key_b64" ] && key_fp=$(printf %s "$key_b64" | base64 -d 2>/dev/null | md5sum |
        cut -c1-32 | sed 's/\(..\)/\1:/g; s/:$//')
    return 0
}
iface_with_mac() {
    for d in /sys/class/net/*; do
        [ "$(cat "$d/address" 2>/dev/null)" = "$1" ] && { echo "${d##*/}"; return 0; }
    done
    return 1
}
apply_network_config() {
    iface=""
    for entry in $(echo "$net_conf" | tr ' ' '='); do
        value=${entry#*=}
        case ${entry%%=*} in
        mac)
            n=0
            until iface=$(iface_with_mac "$value") || [ $n -ge 20 ]; do n=$((n + 1)); sleep 0.1; done
            if [ -n "$iface" ]; then
                ip link set "$iface" up
            else
                say "no interface with MAC $value"
            fi ;;
        addr)
            [ -n "$iface" ] && ip addr add "$value" dev "$iface" &&
                static_addrs="${static_addrs:+$static_addrs,}$value" &&
                static_ifaces="$static_ifaces $iface" ;;
        gw)
            [ -n "$iface" ] && ip route add default via "$value" dev "$iface" ;;
        esac
    done
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
    read_network_config
    read_public_key
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
ip link set lo up
[ -n "$net_conf" ] && apply_network_config
# The old form of the marker, then the static addresses and the key's fingerprint if there are
# any (see guest_ready_line).
echo "NOVAKIT-GUEST-READY hostname=$(hostname) instance-id=$instance_id${static_addrs:+ addresses=$static_addrs}${key_fp:+ key=$key_fp}"

if grep -qw novakit.poweroff /proc/cmdline; then
    sync
    poweroff -f
fi

# Addresses come after the marker so that they never delay it.
if [ -e /sys/class/net/eth0 ] && ! echo " $static_ifaces " | grep -q " eth0 "; then
    ip link set eth0 up
    udhcpc -i eth0 -q -n -t 5 -T 1 -s /usr/share/udhcpc/default.script >/dev/null 2>&1 &
fi
# novakit.ping: reach another guest. It may still be booting, late on a busy host: up to
# 300 tries of a second or so before saying fail; the first answer says ok.
if [ -n "$ping_target" ]; then
    (
        n=0
        while [ $n -lt 300 ]; do
            ping -c 1 -W 1 "$ping_target" >/dev/null 2>&1 && { echo "NOVAKIT-PING $ping_target ok"; exit 0; }
            n=$((n + 1))
            sleep 0.2
        done
        echo "NOVAKIT-PING $ping_target fail"
    ) &
fi

# --- disks (novakit volumes) ------------------------------------------------------------
# Every second, each disk not seen before is reported: "NOVAKIT-DISK <dev> <512-byte sectors>",
# then the text at its start (up to the first NUL, lines joined by ","): "NOVAKIT-DISK-DATA <dev>
# <text>". With novakit.diskmark=WORD on the command line, WORD is appended to that text on each
# new disk after the first two (vda root, config drive) and "NOVAKIT-DISK-MARKED <dev> WORD" said.
diskmark=$(sed -n 's/.*novakit\.diskmark=\([^ ]*\).*/\1/p' /proc/cmdline)
(
    seen=" "
    while :; do
        for d in /sys/block/vd*; do
            [ -e "$d" ] || continue
            dev=${d##*/}
            case "$seen" in *" $dev "*) continue ;; esac
            seen="$seen$dev "
            echo "NOVAKIT-DISK $dev $(cat "$d/size")"
            text=$(dd if=/dev/$dev bs=4096 count=1 2>/dev/null | tr -d '\000')
            echo "NOVAKIT-DISK-DATA $dev $(printf '%s' "$text" | tr '\n' ',')"
            if [ -n "$diskmark" ] && [ "$dev" != vda ] && [ -z "$(ls /sys/block/$dev/holders 2>/dev/null)" ] \
                && ! grep -q "^/dev/$dev " /proc/mounts && [ "$(cat "$d/ro")" = 0 ]; then
                len=$(printf '%s' "$text" | wc -c)
                sep=""
                [ "$len" -gt 0 ] && sep="\n"
                printf "$sep%s\n" "$diskmark" | dd of=/dev/$dev bs=1 seek="$len" conv=notrunc 2>/dev/null
                sync
                echo "NOVAKIT-DISK-MARKED $dev $diskmark"
            fi
        done
        sleep 1
    done
) &

while :; do
    sleep 3600
done
