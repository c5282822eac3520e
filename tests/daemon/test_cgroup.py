from gpuplaned.cgroup import OomCounter, oom_kill_count, oom_kill_file


def test_cgroup_v2(tmp_path):
    (tmp_path / "proc").write_text("0::/user.slice/gp\n")
    (tmp_path / "cg" / "user.slice" / "gp").mkdir(parents=True)
    (tmp_path / "cg" / "user.slice" / "gp" / "memory.events").write_text("low 0\nhigh 0\nmax 2\noom 1\noom_kill 3\n")
    assert oom_kill_count(tmp_path / "proc", tmp_path / "cg") == 3


def test_cgroup_v1_hybrid(tmp_path):
    (tmp_path / "proc").write_text("4:memory:/a/b\n1:cpu:/\n0::/\n")
    (tmp_path / "cg" / "memory" / "a" / "b").mkdir(parents=True)
    (tmp_path / "cg" / "memory" / "a" / "b" / "memory.oom_control").write_text(
        "oom_kill_disable 0\nunder_oom 0\noom_kill 5\n")
    assert oom_kill_count(tmp_path / "proc", tmp_path / "cg") == 5


def test_unknown(tmp_path):
    assert oom_kill_count(tmp_path / "missing", tmp_path) is None
    (tmp_path / "proc").write_text("0::/x\n")
    assert oom_kill_count(tmp_path / "proc", tmp_path / "cg") is None


def test_this_machine_does_not_crash():
    value = oom_kill_count()
    assert value is None or value >= 0


def test_the_kept_open_counter_reads_the_count_afresh_each_time(tmp_path):
    events = tmp_path / "memory.events"
    events.write_text("low 0\noom 0\noom_kill 2\n")
    counter = OomCounter(events)
    try:
        assert counter.read() == 2
        events.write_text("low 0\noom 1\noom_kill 7\n")  # same file (inode): the kept fd sees the new text
        assert counter.read() == 7
        events.unlink()
        events.write_text("oom_kill 9\n")  # replaced: the old fd still reads the old file until it fails
        assert counter.read() in (7, 9)
    finally:
        counter.close()


def test_a_counter_that_cannot_be_read_says_none_and_opens_again_once_it_can(tmp_path):
    assert OomCounter(None).read() is None
    missing = tmp_path / "memory.events"
    counter = OomCounter(missing)
    assert counter.read() is None
    missing.write_text("oom_kill 4\n")
    assert counter.read() == 4
    counter.close()
    counter.close()  # twice: harmless


def test_the_kept_open_counter_agrees_with_a_fresh_read_on_this_machine():
    counter = OomCounter(oom_kill_file())
    try:
        assert counter.read() == oom_kill_count()
    finally:
        counter.close()
