#!/bin/bash
# Runs as a oneshot unit inside the container that `packaging/nspawn/boot.sh upgrade` boots:
# systemd is PID 1, the package check.sh installed is in, and /nscheck holds new.deb (a newer
# version of it), the SDK and upgrade-job.py. With a job running that logs SDK points,
# `apt-get install ./new.deb` must restart gpuplaned (postinst: try-restart) and leave the
# job running, adopted by the new daemon, with the data (jobs, runs, points, the edited
# config) intact. Writes what it saw to /nsout/log and, when every check held,
# /nsout/passed; then powers the container off.
exec >/nsout/log 2>&1
export GPUPLANE_RUNTIME_DIR=/run/gpuplane PATH=/usr/bin:/bin:/usr/sbin:/sbin
failed=
check() { if eval "$2"; then echo "ok: $1"; else echo "FAILED: $1"; failed=yes; fi; }
up() { for _ in $(seq 150); do gpuplanectl status >/dev/null 2>&1 && return 0; sleep 0.2; done; return 1; }
main_pid() { systemctl show gpuplaned -p MainPID --value; }
alive() { kill -0 "$1" 2>/dev/null; }
json() {  # json EXPR < JSON: EXPR in Python over the document d
    /usr/bin/python3 -c 'import json, sys; d = json.load(sys.stdin); print(eval(sys.argv[1], {"d": d}))' "$1"
}
job_status() { gpuplanectl job show "$1" --json | json 'd.get("job", d)["status"]'; }
points() { gpuplanectl run show "$1" --json | json 'd["summary"]["metrics"].get("train/loss", {}).get("count", 0)'; }
jobs_seen() { gpuplanectl jobs --limit 1000 --json | json 'sorted(j["id"] for j in d["jobs"])'; }
schema() { /usr/bin/python3 -c 'import sqlite3, sys; print(sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True).execute("PRAGMA user_version").fetchone()[0])' /var/lib/gpuplane/gpuplane.db; }
wait_for() {  # wait_for CONDITION: up to 30 s
    local end=$((SECONDS + 30))
    while [ $SECONDS -lt $end ]; do eval "$1" 2>/dev/null && return 0; sleep 0.2; done
    return 1
}

OLD=$(dpkg-query -W -f '${Version}' gpuplane); NEW=$(dpkg-deb -f /nscheck/new.deb Version)
NEW_UPSTREAM=${NEW%-*}
echo "installed: gpuplane $OLD; the upgrade: /nscheck/new.deb, gpuplane $NEW"
check "$NEW is newer than $OLD" "dpkg --compare-versions '$NEW' gt '$OLD'"
systemctl enable --now gpuplaned && up
check "systemctl enable --now gpuplaned: READY, gpuplaned ${OLD%-*}" \
    "[ \"\$(gpuplanectl status --json | json 'd[\"daemon\"][\"version\"]')\" = '${OLD%-*}' ]"
echo '# edited before the upgrade' >>/etc/gpuplane/gpuplaned.toml

DIR=/var/tmp/gpuplane-upgrade
mkdir -p "$DIR" && chown gpuplane "$DIR"
JOB=$(gpuplanectl submit --quiet --gpu 0 --name upgrade --cwd "$DIR" -- \
    env PYTHONPATH=/nscheck/sdk /usr/bin/python3 -u /nscheck/upgrade-job.py)
wait_for "[ -e $DIR/phase1 ]"
JPID=$(cat "$DIR/pid"); RUN=$(cat "$DIR/run_id")
check "job $JOB (pid $JPID) runs and logged to run $RUN" "[ -n '$RUN' ] && alive $JPID"
check "run $RUN holds the 50 points logged before the upgrade" "wait_for '[ \"\$(points $RUN)\" = 50 ]'"
# What packaging/README.md "Upgrading" says to do first (root reads the daemon's home).
check "gpuplanectl backup --to DIR, as the README says to before an upgrade" \
    "gpuplanectl backup --to /var/tmp/gpuplane-before-upgrade >/dev/null && [ -s /var/tmp/gpuplane-before-upgrade/gpuplane.db ]"
JOBS_BEFORE=$(jobs_seen); SCHEMA_BEFORE=$(schema); PID_BEFORE=$(main_pid)
echo "before: $(wc -w <<<"$JOBS_BEFORE") jobs, schema version $SCHEMA_BEFORE, gpuplaned pid $PID_BEFORE"

echo "apt-get install /nscheck/new.deb:"
rc=0
DEBIAN_FRONTEND=noninteractive apt-get install -y /nscheck/new.deb >/tmp/apt.log 2>&1 || rc=$?
tr '\r' '\n' </tmp/apt.log | grep -v -e '^(Reading database' -e '^$' | sed 's/^/  | /'
check "apt-get install ./new.deb exited 0" "[ $rc = 0 ]"
check "dpkg: gpuplane $NEW is installed" "[ \"\$(dpkg-query -W -f '\${Version}' gpuplane)\" = '$NEW' ]"
up
PID_AFTER=$(main_pid)
check "the postinst restarted gpuplaned ($PID_BEFORE -> $PID_AFTER)" \
    "[ '$PID_AFTER' != 0 ] && [ '$PID_BEFORE' != '$PID_AFTER' ] && ! alive $PID_BEFORE"
check "/usr/bin/gpuplaned --version: gpuplaned $NEW_UPSTREAM" \
    "[ \"\$(/usr/bin/gpuplaned --version)\" = 'gpuplaned $NEW_UPSTREAM' ]"
check "the running daemon is $NEW_UPSTREAM" \
    "[ \"\$(gpuplanectl status --json | json 'd[\"daemon\"][\"version\"]')\" = '$NEW_UPSTREAM' ]"
check "the unit is still enabled" "[ \"\$(systemctl is-enabled gpuplaned)\" = enabled ]"
check "the job's process ($JPID) lived through the upgrade" "alive $JPID"
check "the new daemon adopted $JOB: RUNNING" "[ \"\$(job_status $JOB)\" = RUNNING ]"
check "the jobs are all still there" "[ \"\$(jobs_seen)\" = \"\$JOBS_BEFORE\" ]"
check "run $RUN still holds its 50 points" "[ \"\$(points $RUN)\" = 50 ]"
check "the schema version is unchanged ($SCHEMA_BEFORE): the same migrations" "[ \"\$(schema)\" = '$SCHEMA_BEFORE' ]"
check "the edited /etc/gpuplane/gpuplaned.toml was kept" \
    "grep -qx '# edited before the upgrade' /etc/gpuplane/gpuplaned.toml && [ ! -e /etc/gpuplane/gpuplaned.toml.dpkg-new ]"

touch "$DIR/go"
timeout 60 gpuplanectl logs -f "$JOB" >/tmp/job.log 2>&1; rc=$?
sed 's/^/  | /' /tmp/job.log
check "logs -f followed $JOB to its end, its whole log there" \
    "[ $rc = 0 ] && grep -qx 'logged steps 0-49 before the upgrade' /tmp/job.log && grep -qx finished /tmp/job.log"
check "$JOB SUCCEEDED" "wait_for '[ \"\$(job_status $JOB)\" = SUCCEEDED ]'"
check "run $RUN holds all 100 points, from before and after the upgrade" "wait_for '[ \"\$(points $RUN)\" = 100 ]'"
journalctl -u gpuplaned --no-pager -o cat | grep -E 'ready|adopt' | tail -n 6 | sed 's/^/  journal: /'

[ -z "$failed" ] && touch /nsout/passed
systemctl --no-block poweroff
