"""``gpuplaned.job_processes`` over real processes: a job's group and session members are its
processes, remembered after they exit; a pid is evidence only for the process that had it
when the file was named; a process of no job, or one made before the job started, is none."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from gpuplaned.job_processes import SLACK_S, JobProcesses

SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]
LEADER = """
import os, sys
pid = os.fork()
if pid == 0:
    sys.stdin.read()
    os._exit(0)
print(pid, flush=True)
sys.stdin.read()
os.waitpid(pid, 0)
print("reaped", flush=True)
sys.stdin.read()
"""


def test_a_group_member_is_remembered_after_it_exits(tmp_path):
    started = time.time()
    # A job (its own group and session) whose main process starts a worker, in its group as a
    # DataLoader worker is, and tells its pid.
    leader = subprocess.Popen([sys.executable, "-c", LEADER], start_new_session=True, stdout=subprocess.PIPE,
                              stdin=subprocess.PIPE)
    try:
        worker = int(leader.stdout.readline())
        processes = JobProcesses()
        processes.track("job", pgid=leader.pid, session=None, main_pid=leader.pid, started_at=started)
        processes.track("other", pgid=os.getpgid(0) + 10 ** 6, started_at=started)
        processes.scan()
        leader.stdin.close()  # the worker exits, and is reaped
        assert leader.stdout.readline() == b"reaped\n"
        now = time.time()
        assert processes.wrote(worker, now) == "job"  # gone, but seen while it was the job's
        assert processes.wrote(leader.pid, now) == "job"
        assert processes.wrote(os.getpid(), now) is None  # this test's process: no job's
        processes.ended("job", now)
        assert processes.wrote(worker, now + 10 * SLACK_S) is None  # named after the job ended: the pid's next owner's
    finally:
        leader.kill()
        leader.wait()
        leader.stdout.close()


def test_a_member_seen_only_when_its_file_is_looked_at_counts_too(tmp_path):
    started = time.time()
    leader = subprocess.Popen(SLEEP, start_new_session=True)
    try:
        processes = JobProcesses()
        processes.track("job", pgid=leader.pid)  # runtime.json not read yet: the group alone
        assert processes.wrote(leader.pid, time.time()) == "job"
        assert processes.wrote(leader.pid, started - 60) is None  # a file named before the process existed
    finally:
        leader.kill()
        leader.wait()


def test_a_session_member_older_than_the_attempt_is_a_leftover_not_the_jobs(tmp_path):
    # The shim's session outlives its jobs: a process left in it by an earlier job is not this one's.
    leftover = subprocess.Popen(SLEEP, start_new_session=True)
    try:
        time.sleep(0.05)
        processes = JobProcesses()
        processes.track("later", pgid=None, session=leftover.pid + 0, started_at=time.time() + 10 * SLACK_S)
        processes.scan()
        assert processes.wrote(leftover.pid, time.time()) is None
    finally:
        leftover.kill()
        leftover.wait()


def test_the_job_holding_a_file_open_is_its_writer(tmp_path):
    path = tmp_path / "events.out.tfevents.1.host"  # a name with no pid: TensorFlow 1's
    holder = subprocess.Popen([sys.executable, "-c", f"f = open({str(path)!r}, 'ab'); print(1, flush=True); "
                               "import time; time.sleep(60)"], start_new_session=True, stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline() == b"1\n"
        processes = JobProcesses()
        processes.track("job", pgid=holder.pid, main_pid=holder.pid, started_at=time.time())
        processes.scan()
        assert processes.holding(str(path)) == "job"
        assert processes.holding(str(tmp_path / "other")) is None
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
