#!/usr/bin/env bash
# Check the packages `make packages` built (`make packages-check` runs it):
#   1. systemd-analyze verify of both units, failing on ANY message (it exits 0 on unknown
#      keys and bad values, and only prints them);
#   2. dpkg -i of the .deb, `gpuplaned --version` from /usr/bin, the installed units verified;
#   3. a smoke test: the installed daemon in the foreground as user gpuplane, with the unit's
#      own command line; `gpuplanectl status`, submit and `logs -f` as a member of group
#      gpuplane (and refused to someone who is not); SIGTERM to the daemon alone, as
#      KillMode=process does: a running job survives and the next daemon adopts it; stop;
#      then the same under a real systemd: this machine's, booted by systemd-nspawn
#      (packaging/nspawn/boot.sh), stops and restarts the installed unit while a job runs;
#      and, in a writable overlay of this machine booted the same way, the upgrade: with a job
#      logging SDK points, `apt-get install` of PACKAGE_DIR/upgrade/gpuplane_*.deb (the same
#      tree built as a newer version: make packages-check builds it) restarts gpuplaned, the
#      new daemon adopts the job, and the jobs, points and edited config are all still there;
#   4. dpkg --purge: the package's files go, the data in /var/lib/gpuplane stays;
#   5. rpm -qpl / -qpR / -qpc on the .rpm, and rpmlint when it is installed.
# Usage: packaging/check.sh [PACKAGE_DIR]   (default dist)
# Steps 2-4 need root and dpkg (and systemd-nspawn for the real systemd), step 5 rpm; each
# is skipped with a message where they are missing, unless PACKAGES_CHECK_STRICT=1 (CI),
# which makes a skip a failure.
# This machine must not have gpuplane installed: the check installs and purges it.
set -euo pipefail  # (so no `| grep -q`: its early exit would SIGPIPE the writer)
cd "$(dirname "$0")/.."
PACKAGE_DIR=${1:-dist}
STRICT=${PACKAGES_CHECK_STRICT:-0}
CHECK_USER=gpuplane-check         # a member of group gpuplane, made and removed here
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpuplane-check.XXXXXX")
chmod 755 "$WORK"
DAEMON_PID=

say() { echo "packages-check: $*"; }
fail() { echo "packages-check: FAILED: $*" >&2; exit 1; }
skip() {
    [ "$STRICT" = 1 ] && fail "$* (PACKAGES_CHECK_STRICT=1: nothing may be skipped)"
    echo "packages-check: SKIPPED: $*" >&2
}

newest() { ls -t "$PACKAGE_DIR"/$1 2>/dev/null | head -n 1; }
DEB=$(newest 'gpuplane_*.deb'); RPM=$(newest 'gpuplane-*.rpm'); UPGRADE_DEB=$(newest 'upgrade/gpuplane_*.deb')
[ -n "$DEB" ] || fail "no gpuplane_*.deb in $PACKAGE_DIR (make packages PACKAGE_DIR=$PACKAGE_DIR)"
[ -n "$RPM" ] || fail "no gpuplane-*.rpm in $PACKAGE_DIR"
VERSION=$(basename "$DEB" | sed -E 's/^gpuplane_([^-_]+)-.*/\1/')

# ---- 1. the units, offline ------------------------------------------------------------
# verify needs ExecStart to exist on this machine: check copies that run /bin/true here,
# and the installed files once the .deb is in (step 2).
verify() {  # verify [--user] UNIT_FILE
    local out rc=0
    if [ "$1" = --user ]; then
        mkdir -p "$WORK/xdg"; chmod 700 "$WORK/xdg"
        out=$(XDG_RUNTIME_DIR=$WORK/xdg systemd-analyze --user verify --man=no "$2" 2>&1) || rc=$?
        shift
    else
        out=$(systemd-analyze verify --man=no "$1" 2>&1) || rc=$?
    fi
    [ "$rc" = 0 ] && [ -z "$out" ] || fail "systemd-analyze verify $1 (rc $rc):"$'\n'"$out"
    say "verified $1"
}
if command -v systemd-analyze >/dev/null 2>&1; then
    mkdir -p "$WORK/units/user"  # each named as installed: gpuplaned.service
    sed 's#^ExecStart=/usr/bin/gpuplaned#ExecStart=/bin/true#' packaging/systemd/gpuplaned.service \
        > "$WORK/units/gpuplaned.service"
    sed 's#^ExecStart=/usr/bin/gpuplaned#ExecStart=/bin/true#' packaging/systemd/gpuplaned-user.service \
        > "$WORK/units/user/gpuplaned.service"
    verify "$WORK/units/gpuplaned.service"
    verify --user "$WORK/units/user/gpuplaned.service"
else
    skip "no systemd-analyze: the units are not verified (Debian: apt-get install systemd)"
fi

# ---- 2-4. install, smoke test, purge ---------------------------------------------------
as_member() {  # run a command as $CHECK_USER, with the system daemon's runtime dir
    setpriv --reuid "$CHECK_USER" --regid "$CHECK_USER" --init-groups -- \
        env -i PATH=/usr/bin:/bin HOME="$WORK/home" LANG=C.UTF-8 GPUPLANE_RUNTIME_DIR=/run/gpuplane "$@"
}
start_daemon() {  # the installed unit's ExecStart, as its User=, in the foreground
    local exec_start
    exec_start=$(sed -n 's/^ExecStart=//p' /usr/lib/systemd/system/gpuplaned.service)
    # --http on a free port: this machine may run other daemons on 8765. --gpus none: the
    # job is a CPU job, whatever GPUs this machine has.
    # shellcheck disable=SC2086 # the unit's command line, split as systemd splits it (no quotes in it)
    env -i PATH=/usr/bin:/bin HOME=/var/lib/gpuplane LANG=C.UTF-8 \
        setpriv --reuid gpuplane --regid gpuplane --init-groups -- \
        $exec_start --http 127.0.0.1:0 --gpus none >>"$WORK/gpuplaned.log" 2>&1 &
    DAEMON_PID=$!
    for _ in $(seq 200); do
        as_member gpuplanectl status >/dev/null 2>&1 && return 0
        kill -0 "$DAEMON_PID" 2>/dev/null || { cat "$WORK/gpuplaned.log" >&2; fail "gpuplaned exited at start"; }
        sleep 0.1
    done
    cat "$WORK/gpuplaned.log" >&2; fail "gpuplaned did not answer gpuplanectl status within 20 s"
}
stop_daemon() {  # SIGTERM to the main pid only: what KillMode=process does
    kill -TERM "$DAEMON_PID"
    local rc=0
    wait "$DAEMON_PID" || rc=$?
    DAEMON_PID=
    [ "$rc" = 0 ] || { cat "$WORK/gpuplaned.log" >&2; fail "gpuplaned exited $rc on SIGTERM (want 0)"; }
}
job_field() {  # job_field JOB FIELD
    as_member gpuplanectl job show "$1" --json | /usr/lib/gpuplane/venv/bin/python -c \
        "import json, sys; d = json.load(sys.stdin); print(d.get('job', d)['$2'])"
}
INSTALLED=
cleanup() {  # after a failure too: leave the machine as it was (but for the gpuplane user)
    [ -n "$DAEMON_PID" ] && kill -KILL "$DAEMON_PID" 2>/dev/null || true
    [ -n "${SLEEPER_PID:-}" ] && kill -KILL "$SLEEPER_PID" 2>/dev/null || true
    getent passwd "$CHECK_USER" >/dev/null 2>&1 && userdel "$CHECK_USER" 2>/dev/null || true
    if [ -n "$INSTALLED" ]; then
        dpkg --purge gpuplane >/dev/null 2>&1 || true
        rm -rf /var/lib/gpuplane
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

if [ "$(id -u)" != 0 ]; then
    skip "not root: the .deb is not installed, smoke-tested or purged"
elif ! command -v dpkg >/dev/null 2>&1; then
    skip "no dpkg: the .deb is not installed, smoke-tested or purged"
else
    if dpkg-query -W -f '${Status}' gpuplane 2>/dev/null | grep -x "install ok installed" >/dev/null; then
        fail "gpuplane is already installed here; this check installs and purges it: purge it first"
    fi
    [ ! -e /var/lib/gpuplane ] || fail "/var/lib/gpuplane exists (data of an earlier install?): move it away first"
    say "dpkg -i $DEB"
    INSTALLED=yes
    dpkg -i "$DEB" >"$WORK/dpkg.log" 2>&1 || { cat "$WORK/dpkg.log" >&2; fail "dpkg -i $DEB"; }
    got=$(/usr/bin/gpuplaned --version)
    [ "$got" = "gpuplaned $VERSION" ] || fail "/usr/bin/gpuplaned --version said '$got', want 'gpuplaned $VERSION'"
    say "/usr/bin/gpuplaned --version: $got"
    /usr/bin/gpuplanectl --help >/dev/null || fail "/usr/bin/gpuplanectl --help"
    getent passwd gpuplane >/dev/null || fail "the install made no gpuplane user"
    [ "$(stat -c '%U %a' /var/lib/gpuplane)" = "gpuplane 700" ] || fail "/var/lib/gpuplane is $(stat -c '%U %a' /var/lib/gpuplane)"
    grep -qx /etc/gpuplane/gpuplaned.toml /var/lib/dpkg/info/gpuplane.conffiles \
        || fail "/etc/gpuplane/gpuplaned.toml is not a conffile"
    [ ! -e /etc/systemd/system/multi-user.target.wants/gpuplaned.service ] || fail "the install enabled the system unit"
    [ ! -e /etc/systemd/user/default.target.wants/gpuplaned.service ] || fail "the install enabled the user unit for everyone"
    if command -v systemd-analyze >/dev/null 2>&1; then
        verify /usr/lib/systemd/system/gpuplaned.service
        verify --user /usr/lib/systemd/user/gpuplaned.service
    fi
    man -l /usr/share/man/man1/gpuplanectl.1.gz 2>/dev/null | grep "COMMAND: JOB SUBMIT" >/dev/null \
        || { command -v man >/dev/null 2>&1 && fail "gpuplanectl(1) has no JOB SUBMIT section"; }

    # The smoke test. The client is a member of group gpuplane, not root (root would pass
    # any permission), so it also shows that the group reaches the socket.
    useradd --system --no-create-home --shell /usr/sbin/nologin --groups gpuplane "$CHECK_USER"
    mkdir -p "$WORK/home" "$WORK/job" && chown "$CHECK_USER" "$WORK/home" && chown gpuplane "$WORK/job"
    start_daemon
    say "gpuplaned runs as $(ps -o user= -p "$DAEMON_PID") (pid $DAEMON_PID); gpuplanectl status as $CHECK_USER:"
    as_member gpuplanectl status
    if setpriv --reuid nobody --regid nogroup --clear-groups -- env -i PATH=/usr/bin:/bin HOME=/tmp \
            GPUPLANE_RUNTIME_DIR=/run/gpuplane gpuplanectl status >/dev/null 2>&1; then
        fail "user nobody, not in group gpuplane, could use the daemon"
    fi
    say "refused to nobody (not in group gpuplane), as it should be"
    # The web UI the package ships, served by the installed daemon's HTTP front.
    front=None
    for _ in $(seq 100); do  # the front listens a moment after the socket answers
        front=$(as_member gpuplanectl status --json | /usr/lib/gpuplane/venv/bin/python -c \
            "import json, sys; print(json.load(sys.stdin)['daemon']['endpoints'].get('http'))")
        [ "$front" != None ] && break
        sleep 0.1
    done
    page=$(/usr/lib/gpuplane/venv/bin/python -c "import sys, urllib.request as u; print(u.urlopen(sys.argv[1]).read().decode())" \
        "$front/" 2>&1) || fail "GET $front/ failed: $page"
    printf '%s\n' "$page" | grep -i '<script' >/dev/null || fail "GET $front/ is not the built web UI:"$'\n'"$page"
    say "the HTTP front ($front) serves the packaged web UI"
    JOB=$(as_member gpuplanectl submit --quiet --gpu 0 --name smoke --cwd "$WORK/job" -- \
        sh -c 'echo hello from $(id -un); echo done')
    out=$(as_member timeout 60 gpuplanectl logs -f "$JOB") || fail "logs -f $JOB exited $? (the job failed?): $out"
    printf '%s\n' "$out" | grep -x "hello from gpuplane" >/dev/null || fail "logs -f $JOB printed:"$'\n'"$out"
    say "job $JOB ran as gpuplane; logs -f followed it to its end"

    # Stop semantics of the unit (KillMode=process), with the installed programs.
    LONG=$(as_member gpuplanectl submit --quiet --gpu 0 --name sleeper --cwd "$WORK/job" -- \
        sh -c 'echo $$ > pid; while [ ! -e finish ]; do sleep 0.1; done; echo finished')
    for _ in $(seq 100); do [ -s "$WORK/job/pid" ] && break; sleep 0.1; done
    [ "$(job_field "$LONG" status)" = RUNNING ] || fail "job $LONG did not start"
    SLEEPER_PID=$(cat "$WORK/job/pid")
    stop_daemon
    kill -0 "$SLEEPER_PID" 2>/dev/null || fail "job $LONG (pid $SLEEPER_PID) died with the daemon"
    say "SIGTERM to gpuplaned alone: it exited 0 and job $LONG (pid $SLEEPER_PID) kept running"
    start_daemon
    [ "$(job_field "$LONG" status)" = RUNNING ] || fail "the restarted daemon did not adopt job $LONG"
    touch "$WORK/job/finish"
    as_member timeout 60 gpuplanectl logs -f "$LONG" | grep -x finished >/dev/null || fail "job $LONG did not finish after adoption"
    SLEEPER_PID=
    say "the next gpuplaned adopted job $LONG and saw it end"
    stop_daemon
    userdel "$CHECK_USER"

    # The same under a real systemd: this machine's own, booted in a container.
    if command -v systemd-nspawn >/dev/null 2>&1; then
        say "booting this machine's systemd in systemd-nspawn: stop, restart and start gpuplaned.service under it"
        nspawn_rc=0
        packaging/nspawn/boot.sh units || nspawn_rc=$?
        case $nspawn_rc in
            0) say "under systemd as PID 1 the unit stopped and restarted gpuplaned alone; the job lived on" ;;
            1) skip "systemd-nspawn could not boot a container here: the unit was not run under a real systemd" ;;
            *) fail "the unit under a real systemd (packaging/nspawn/inside.sh, log above)" ;;
        esac
        if [ -z "$UPGRADE_DEB" ]; then
            skip "no $PACKAGE_DIR/upgrade/gpuplane_*.deb (make packages-check builds it): the upgrade was not checked"
        elif [ "$nspawn_rc" = 0 ]; then
            say "the upgrade under systemd: apt-get install $UPGRADE_DEB over $(basename "$DEB") while a job runs"
            nspawn_rc=0
            packaging/nspawn/boot.sh upgrade "$UPGRADE_DEB" sdk/gpuplane || nspawn_rc=$?
            case $nspawn_rc in
                0) say "the upgrade restarted gpuplaned; the job lived on, adopted, and the data is intact" ;;
                1) skip "systemd-nspawn could not boot the overlay container here: the upgrade was not checked" ;;
                *) fail "the upgrade under a real systemd (packaging/nspawn/inside-upgrade.sh, log above)" ;;
            esac
        fi
    else
        skip "no systemd-nspawn (Debian: apt-get install systemd-container): the unit was not run under a real systemd"
    fi

    say "dpkg --purge gpuplane"
    dpkg --purge gpuplane >"$WORK/dpkg.log" 2>&1 || { cat "$WORK/dpkg.log" >&2; fail "dpkg --purge gpuplane"; }
    for gone in /usr/lib/gpuplane /usr/bin/gpuplaned /usr/bin/gpuplanectl /etc/gpuplane /run/gpuplane \
            /usr/lib/systemd/system/gpuplaned.service; do
        [ ! -e "$gone" ] || fail "$gone is still there after the purge"
    done
    [ -f /var/lib/gpuplane/gpuplane.db ] || fail "the purge removed the data in /var/lib/gpuplane (it must keep it unless asked)"
    rm -rf /var/lib/gpuplane  # the data this check made; the gpuplane user stays, as after any purge
    INSTALLED=
    say "purged: the package's files are gone, its data was kept (and removed here by the check)"
fi

# ---- 5. the .rpm -----------------------------------------------------------------------
if command -v rpm >/dev/null 2>&1; then
    files=$(rpm -qpl "$RPM" 2>/dev/null)
    for want in /usr/bin/gpuplaned /usr/bin/gpuplanectl /usr/lib/systemd/system/gpuplaned.service \
            /usr/lib/systemd/user/gpuplaned.service /etc/gpuplane/gpuplaned.toml \
            /usr/share/man/man1/gpuplaned.1.gz /usr/lib/gpuplane/venv/bin/gpuplaned; do
        printf '%s\n' "$files" | grep -x "$want" >/dev/null || fail "$RPM does not hold $want"
    done
    printf '%s\n' "$files" | grep '/usr/lib/gpuplane/venv/lib/python3.*/site-packages/gpuplaned/_web/index.html' >/dev/null \
        || fail "$RPM does not hold the web UI"
    say "rpm -qpl: $(printf '%s\n' "$files" | wc -l) files, the programs, units, config, man pages and web UI among them"
    rpm -qpc "$RPM" 2>/dev/null | grep -x /etc/gpuplane/gpuplaned.toml >/dev/null || fail "the config is not %config in $RPM"
    say "rpm -qpR:"; rpm -qpR "$RPM" 2>/dev/null | sed 's/^/    /'
    rpm -qpR "$RPM" 2>/dev/null | grep '^python3 >= ' >/dev/null || fail "$RPM does not require python3"
    rpm -qp --scripts "$RPM" 2>/dev/null | grep 'useradd --system' >/dev/null || fail "$RPM has no script making the gpuplane user"
    if command -v rpmlint >/dev/null 2>&1; then
        lint_rc=0
        rpmlint -c packaging/rpmlint.toml "$RPM" >"$WORK/rpmlint.log" 2>&1 || lint_rc=$?
        tail -n 1 "$WORK/rpmlint.log" | sed 's/^/packages-check: rpmlint: /'
        if grep -q ': E: ' "$WORK/rpmlint.log"; then
            grep ': E: ' "$WORK/rpmlint.log" >&2; fail "rpmlint found errors (rc $lint_rc)"
        fi
    else
        say "rpmlint is not installed (Debian: apt-get install rpmlint): not run"
    fi
else
    skip "no rpm: the .rpm is not checked (Debian: apt-get install rpm)"
fi
say "all checks passed"
