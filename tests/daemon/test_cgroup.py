from gpuplaned.cgroup import oom_kill_count


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
