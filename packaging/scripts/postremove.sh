#!/bin/sh
# After removal (.deb: postrm remove|purge|upgrade|...; .rpm: %postun with $1 = 0 erase, 1 upgrade).
# purge removes what the package made: /run/gpuplane, and /var/lib/gpuplane (the database,
# the jobs' logs) ONLY when asked: GPUPLANE_PURGE_DATA=yes dpkg --purge gpuplane.
# The gpuplane user and group are kept (see postinstall).
set -e
if [ "$1" = purge ]; then
    rm -rf /run/gpuplane
    if [ "${GPUPLANE_PURGE_DATA:-}" = yes ]; then
        rm -rf /var/lib/gpuplane
    elif [ -d /var/lib/gpuplane ]; then
        echo "gpuplane: kept the data in /var/lib/gpuplane (remove it by hand, or purge with GPUPLANE_PURGE_DATA=yes)" >&2
    fi
    rmdir /etc/gpuplane 2>/dev/null || true
fi
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload || true
fi
exit 0
