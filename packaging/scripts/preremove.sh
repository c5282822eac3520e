#!/bin/sh
# Before removal (.deb: prerm remove|upgrade|...; .rpm: %preun with $1 = 0 erase, 1 upgrade).
# On removal: stop and disable the system unit (its jobs keep running: KillMode=process;
# cancel them first with `gpuplanectl stop JOB`). On any change: drop the compiled bytecode
# that postinstall made, which the package does not own.
set -e
case "$1" in
    remove|deconfigure|0) removing=yes ;;
    upgrade|failed-upgrade) removing= ;;
    *) [ "${1:-0}" -eq 0 ] 2>/dev/null && removing=yes || removing= ;;
esac
if [ -n "$removing" ]; then
    if [ -d /run/systemd/system ]; then
        systemctl --no-reload disable --now gpuplaned.service >/dev/null 2>&1 || true
    elif command -v systemctl >/dev/null 2>&1; then
        systemctl --no-reload disable gpuplaned.service >/dev/null 2>&1 || true
    fi
fi
# rpm runs the old package's %preun after the new one's %post: keep its bytecode then.
case "$1" in
    1) ;;
    *) find /usr/lib/gpuplane/venv -name __pycache__ -type d -prune -exec rm -rf {} + 2>/dev/null || true ;;
esac
exit 0
