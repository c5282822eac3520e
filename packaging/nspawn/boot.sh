#!/bin/bash
# Boot a real systemd (this machine's own, in a systemd-nspawn container) and run one check
# of the INSTALLED package under it (packaging/check.sh calls it between dpkg -i and the purge):
#   boot.sh units             inside.sh: systemd stops, restarts and starts gpuplaned.service
#                             while a job runs. The container shares this machine's /usr and
#                             /etc read-only (so it has the package, its user and config), with
#                             a fresh /var and /run.
#   boot.sh upgrade NEW_DEB SDK_DIR
#                             inside-upgrade.sh: with a job running, NEW_DEB is installed over
#                             the installed package. dpkg must write /usr, /etc and its database,
#                             so the container's root is a writable overlay of this machine's
#                             (changes go to a tmpfs and vanish with it). SDK_DIR is the SDK
#                             (sdk/gpuplane) the job logs points with.
# Needs root and systemd-nspawn (Debian: systemd-container); upgrade also unshare and overlayfs.
# Exit 0: every check in the inside script held; 2: one failed; 1: the container did not boot
# or never ran the checks. The log is printed either way.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
CHECK=${1:?usage: boot.sh units | boot.sh upgrade NEW_DEB SDK_DIR}
case $CHECK in
    units) INSIDE=inside.sh ;;
    upgrade)
        INSIDE=inside-upgrade.sh
        NEW_DEB=${2:?boot.sh upgrade NEW_DEB SDK_DIR}; SDK_DIR=${3:?boot.sh upgrade NEW_DEB SDK_DIR}
        # A mount namespace of our own: the overlay goes away with this script, however it ends.
        if [ -z "${GPUPLANE_NSPAWN_UNSHARED:-}" ]; then
            exec env GPUPLANE_NSPAWN_UNSHARED=1 unshare --mount --propagation private -- "$0" "$@"
        fi
        ;;
    *) echo "boot.sh: no check '$CHECK' (units or upgrade)" >&2; exit 1 ;;
esac
OUT=$(mktemp -d "${TMPDIR:-/tmp}/gpuplane-nspawn.XXXXXX")
chmod 755 "$OUT"  # the job (user gpuplane) reads its script and the SDK from /nscheck
trap 'rm -rf "$OUT"' EXIT
mkdir -p "$OUT/units" "$OUT/out"
cp "$HERE/$INSIDE" "$OUT/inside.sh"
cat >"$OUT/units/gpuplane-nspawn-check.service" <<'EOF'
[Unit]
Description=GPUPlane: the installed package under a real systemd
After=multi-user.target
[Service]
Type=oneshot
ExecStart=/bin/bash /nscheck/inside.sh
EOF

if [ "$CHECK" = units ]; then
    # --volatile=yes: a tmpfs root with /usr bound from here.
    ROOT=(-D / --volatile=yes --bind-ro=/etc)
else
    cp "$NEW_DEB" "$OUT/new.deb"
    mkdir "$OUT/sdk" && cp -r "$SDK_DIR" "$OUT/sdk/gpuplane"  # the job's PYTHONPATH=/nscheck/sdk
    find "$OUT/sdk" -name __pycache__ -prune -exec rm -rf {} +
    cp "$HERE/upgrade-job.py" "$OUT/upgrade-job.py"
    # nspawn refuses --volatile=overlay on /: make the overlay by hand, of / alone (a
    # non-recursive bind: not /proc, /sys, /dev, /tmp's mounts) with a tmpfs on top. Not
    # under $OUT, which the container binds.
    MNT=$(mktemp -d "${TMPDIR:-/tmp}/gpuplane-overlay.XXXXXX")
    # Never rm -r here: $MNT/lower is this machine's /. rmdir only takes empty, unmounted dirs.
    trap 'rm -rf "$OUT"; umount "$MNT/root" "$MNT/rw" "$MNT/lower" 2>/dev/null || true
          rmdir "$MNT/root" "$MNT/rw" "$MNT/lower" "$MNT" 2>/dev/null || true' EXIT
    mkdir -p "$MNT/lower" "$MNT/rw" "$MNT/root"
    mount --bind / "$MNT/lower"
    mount -t tmpfs -o mode=0755 gpuplane-upper "$MNT/rw"
    mkdir -p "$MNT/rw/upper" "$MNT/rw/work"
    mount -t overlay gpuplane-root -o "lowerdir=$MNT/lower,upperdir=$MNT/rw/upper,workdir=$MNT/rw/work" "$MNT/root"
    ROOT=(-D "$MNT/root")
fi
rc=0
# --register=no --keep-unit: no machined or bus needed on this side. systemd.wants= starts
# the check at boot.
timeout 240 systemd-nspawn --quiet --register=no --keep-unit "${ROOT[@]}" \
    --bind="$OUT/units:/run/systemd/system" --bind-ro="$OUT:/nscheck" --bind="$OUT/out:/nsout" \
    -b systemd.wants=gpuplane-nspawn-check.service >"$OUT/console.log" 2>&1 </dev/null || rc=$?
if [ ! -f "$OUT/out/log" ]; then
    tail -n 40 "$OUT/console.log" >&2
    echo "nspawn: the check never ran in the container (systemd-nspawn rc $rc)" >&2
    exit 1
fi
sed 's/^/    /' "$OUT/out/log"
[ -f "$OUT/out/passed" ] || exit 2
