#!/bin/sh
# PID 1 of the Soft-RoCE VM (see run.sh): loads the modules, sets eth0 and rxe0 up, runs
# /run.sh with its output on the second serial port (ttyS1), reports its exit status
# there as "SOFTROCE-STATUS N" (125: the VM itself could not be set up), powers off.
/bin/busybox --install -s /bin
export PATH=/bin:/usr/bin:/usr/sbin
export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
OUT=/dev/ttyS1
# Set-up errors go where the host reads.
exec 2>$OUT

finish() {
  # A separate open/close per line: close waits until the UART has sent it.
  # On a line of its own even when the script's output did not end with one.
  printf '\nSOFTROCE-STATUS %s\n' "$1" >$OUT
  sync
  poweroff -f
}
fail() {
  echo "softroce VM: $*" >$OUT
  finish 125
}

for m in $(cat /modules/order); do
  insmod "/modules/$m" || fail "insmod $m failed"
done
VM_IP=$(cat /etc/vm_ip)
export VM_IP
hostname softroce
ip link set lo up
ip link set eth0 up || fail "no eth0 (virtio-net)"
ip addr add "$VM_IP/24" dev eth0 || fail "cannot set $VM_IP on eth0"
rdma link add rxe0 type rxe netdev eth0 || fail "rdma link add rxe0 type rxe netdev eth0 failed: $(dmesg | tail -n 5)"
# The port turns ACTIVE once the netdev has carrier.
i=0
until grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null; do
  i=$((i + 1))
  [ $i -lt 100 ] || fail "rxe0 port never became ACTIVE: $(cat /sys/class/infiniband/rxe0/ports/1/state 2>&1)"
  sleep 0.1
done
cd /tmp
sh /run.sh >$OUT 2>&1
finish $?
