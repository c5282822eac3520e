import pytest

from gpuplaned.runtime.spec import ActorSpec, Restart, RestartPolicy, order_by_dependencies
from gpuplaned.runtime.states import ALLOWED_TRANSITIONS, ActorState, InvalidTransition, check_transition


async def _noop(ctx, *, task_status):
    task_status.started()


def spec(name, *deps, **kw):
    return ActorSpec(name, _noop, frozenset({"all"}), depends_on=deps, **kw)


def test_policy_doubles_delay_and_caps_it():
    policy = RestartPolicy(spec("a", backoff_initial=1, backoff_max=5, max_restarts=10, max_seconds=100))
    delays = [policy.on_exit(float(t), crashed=True).delay for t in range(5)]
    assert delays == [1, 2, 4, 5, 5]


def test_policy_budget_and_reset():
    policy = RestartPolicy(spec("a", max_restarts=2, max_seconds=10))
    assert policy.on_exit(0, crashed=True).restart
    assert policy.on_exit(1, crashed=True).restart
    decision = policy.on_exit(2, crashed=True)
    assert not decision.restart and "2 restarts within 10 s" in decision.reason
    assert policy.on_exit(11.5, crashed=True).restart  # the window moved past both
    policy.reset()
    assert policy.on_exit(12, crashed=True).delay == 0.5


@pytest.mark.parametrize("restart, crashed, expected", [
    (Restart.PERMANENT, False, True),
    (Restart.PERMANENT, True, True),
    (Restart.TRANSIENT, False, False),
    (Restart.TRANSIENT, True, True),
    (Restart.TEMPORARY, True, False),
])
def test_restart_kinds(restart, crashed, expected):
    assert RestartPolicy(spec("a", restart=restart)).on_exit(0, crashed=crashed).restart is expected


def test_dependency_order_keeps_given_order_among_independents():
    specs = [spec("c", "a"), spec("b"), spec("a")]
    assert [s.name for s in order_by_dependencies(specs)] == ["a", "c", "b"]


def test_dependency_errors():
    with pytest.raises(ValueError, match="unknown actor 'z'"):
        order_by_dependencies([spec("a", "z")])
    with pytest.raises(ValueError, match="cycle: a -> b -> a"):
        order_by_dependencies([spec("a", "b"), spec("b", "a")])


def test_state_table():
    S = ActorState
    check_transition(S.STOPPED, S.STARTING)
    check_transition(S.RUNNING, S.BACKOFF)
    with pytest.raises(InvalidTransition, match="from STOPPED to RUNNING"):
        check_transition(S.STOPPED, S.RUNNING)
    with pytest.raises(InvalidTransition):
        check_transition(S.FATAL, S.RUNNING)
    # every state can eventually get back to STARTING
    for state, nexts in ALLOWED_TRANSITIONS.items():
        assert nexts, state
