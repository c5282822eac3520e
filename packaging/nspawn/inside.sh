#!/bin/bash
# Runs as a oneshot unit inside the container that packaging/nspawn/boot.sh boots: systemd
# is PID 1 there and acts on the installed gpuplaned.service. Writes what it saw to
# /nsout/log and, when every check held, /nsout/passed; then powers the container off.
exec >/nsout/log 2>&1
export GPUPLANE_RUNTIME_DIR=/run/gpuplane PATH=/usr/bin:/bin:/usr/sbin:/sbin
failed=
check() { if eval "$2"; then echo "ok: $1"; else echo "FAILED: $1"; failed=yes; fi; }
up() { for _ in $(seq 150); do gpuplanectl status >/dev/null 2>&1 && return 0; sleep 0.2; done; return 1; }
main_pid() { systemctl show gpuplaned -p MainPID --value; }
alive() { kill -0 "$1" 2>/dev/null; }
job() {  # job NAME: submit a job that waits for DIR/finish, and wait for its pid
    local dir=/var/tmp/gpuplane-nspawn/$1
    mkdir -p "$dir" && chown gpuplane "$dir"
    gpuplanectl submit --quiet --gpu 0 --cwd "$dir" -- sh -c 'echo $$ > pid; while [ ! -e finish ]; do sleep 0.1; done; echo finished'
    for _ in $(seq 100); do [ -s "$dir/pid" ] && break; sleep 0.1; done
}

systemctl start gpuplaned && up
check "systemctl start gpuplaned: READY" up || journalctl -u gpuplaned --no-pager | tail -n 30
systemctl show gpuplaned -p User -p KillMode -p Restart -p ControlGroup -p MainPID
ls -l /run/gpuplane
JOB=$(job a); JPID=$(cat /var/tmp/gpuplane-nspawn/a/pid)
check "the job ($JPID) is in the unit's cgroup" \
    "[ \"\$(cut -d: -f3 /proc/$JPID/cgroup | sort -u | grep -c '/system.slice/gpuplaned.service')\" -ge 1 ]"
cat "/proc/$JPID/cgroup"

OLD=$(main_pid); systemctl restart gpuplaned && up; NEW=$(main_pid)
check "systemctl restart: a new main pid ($OLD -> $NEW), the job ($JPID) alive" "[ $OLD != $NEW ] && alive $JPID"
check "the restarted daemon adopted $JOB" "gpuplanectl job show $JOB --json | grep -Eq '\"status\": ?\"RUNNING\"'"
# A crash: Restart=on-failure brings it back (after RestartSec=2), the job untouched.
OLD=$(main_pid); kill -KILL "$OLD"
for _ in $(seq 100); do NEW=$(main_pid); [ "$NEW" != 0 ] && [ "$NEW" != "$OLD" ] && break; sleep 0.1; done
up
check "SIGKILL of gpuplaned: systemd restarted it ($OLD -> $NEW), the job ($JPID) alive" \
    "[ $NEW != 0 ] && [ $OLD != $NEW ] && alive $JPID"
systemctl stop gpuplaned
check "systemctl stop: inactive, the job alive" "[ \$(systemctl show gpuplaned -p ActiveState --value) = inactive ] && alive $JPID"
systemctl start gpuplaned && up
touch /var/tmp/gpuplane-nspawn/a/finish
check "after a stop and a start, logs -f follows $JOB to its end" \
    "timeout 60 gpuplanectl logs -f $JOB | grep -qx finished"

# The contrast: systemd's default KillMode=control-group, through a runtime drop-in.
mkdir -p /run/systemd/system/gpuplaned.service.d
printf '[Service]\nKillMode=control-group\n' >/run/systemd/system/gpuplaned.service.d/kill.conf
systemctl daemon-reload && systemctl restart gpuplaned && up
job b >/dev/null; J2=$(cat /var/tmp/gpuplane-nspawn/b/pid)
systemctl stop gpuplaned; sleep 1
check "with KillMode=control-group instead, systemctl stop kills the job ($J2)" "! alive $J2"
rm -rf /run/systemd/system/gpuplaned.service.d && systemctl daemon-reload

[ -z "$failed" ] && touch /nsout/passed
systemctl --no-block poweroff
