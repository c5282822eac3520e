#!/bin/sh
# After unpacking (.deb: postinst configure OLD-VERSION; .rpm: %post with $1 = 1 install, 2 upgrade).
# Creates the gpuplane user and its dirs and compiles the venv's bytecode. Enables and starts
# nothing on a first install; on an upgrade it restarts gpuplaned only if it was running
# (KillMode=process: the jobs keep running and the new daemon adopts them).
set -e
case "$1" in
    abort-*) exit 0 ;;
    configure) upgrade=${2:+yes} ;;
    *) [ "${1:-1}" -ge 2 ] 2>/dev/null && upgrade=yes || upgrade= ;;
esac

# A system user and group of its own; kept on purge, as Debian does for system users (files it
# owned, e.g. job outputs elsewhere, must not pass to a later user who gets the same uid).
if ! getent group gpuplane >/dev/null; then
    groupadd --system gpuplane
fi
if ! getent passwd gpuplane >/dev/null; then
    useradd --system --gid gpuplane --home-dir /var/lib/gpuplane --no-create-home \
        --shell /usr/sbin/nologin --comment "GPUPlane daemon" gpuplane
fi
# systemd makes both at start (StateDirectory=, RuntimeDirectory=); made here too for hosts
# without systemd, where gpuplaned runs in the foreground as gpuplane.
[ -d /var/lib/gpuplane ] || install -d -m 0700 -o gpuplane -g gpuplane /var/lib/gpuplane
[ -d /run/gpuplane ] || install -d -m 0750 -o gpuplane -g gpuplane /run/gpuplane

# The package ships no .pyc (they would carry the build machine's paths); gpuplane cannot
# write them itself, so compile once here. Removed again by preremove.
/usr/lib/gpuplane/venv/bin/python -m compileall -q -j 0 /usr/lib/gpuplane/venv/lib >/dev/null || true

if [ -d /run/systemd/system ]; then
    systemctl daemon-reload || true
    if [ -n "$upgrade" ]; then
        systemctl try-restart gpuplaned.service || true
    fi
fi
exit 0
