"""The debounce rule with plain numbers: stable for the window, not held open, registered once;
a final pass (the writers exited) takes what is there at once."""

from gpuplaned.checkpoints.stability import Observation, Stability

A = "/r/checkpoints/step_10.pt"
B = "/r/checkpoints/step_20.pt"


def test_ready_once_stable_for_the_window_then_not_again():
    rule = Stability(window_s=10)
    seen = {A: Observation(100, 1)}
    assert rule.feed(0, seen) == []
    assert rule.feed(9.9, seen) == []
    assert rule.feed(10, seen) == [A]
    rule.registered(A, seen[A])
    assert rule.feed(11, seen) == []
    assert rule.feed(1000, seen) == []
    assert rule.pending() == 0


def test_a_growing_file_waits_until_it_stops_growing():
    rule = Stability(window_s=10)
    for t, size in enumerate(range(0, 100, 10)):
        assert rule.feed(t * 5, {A: Observation(size, t)}) == []
    last = Observation(90, 9)
    assert rule.feed(54.9, {A: last}) == []
    assert rule.feed(55, {A: last}) == [A]


def test_a_file_open_for_writing_is_never_ready_and_its_window_starts_when_closed():
    rule = Stability(window_s=10)
    held = Observation(100, 1, writing=True)
    assert rule.feed(0, {A: held}) == []
    assert rule.feed(60, {A: held}) == []
    free = Observation(100, 1)
    assert rule.feed(65, {A: free}) == []
    assert rule.feed(70, {A: free}) == [A]


def test_a_failed_registration_is_offered_again():
    rule = Stability(window_s=1)
    seen = {A: Observation(5, 5)}
    rule.feed(0, seen)
    assert rule.feed(1, seen) == [A]
    assert rule.feed(2, seen) == [A]  # not registered: still ready
    rule.registered(A, Observation(6, 6))  # another size than the one now seen: not taken
    assert rule.feed(3, seen) == [A]


def test_a_rewritten_file_is_ready_again_once_it_settles():
    rule = Stability(window_s=10)
    first = Observation(100, 1)
    rule.feed(0, {A: first})
    assert rule.feed(10, {A: first}) == [A]
    rule.registered(A, first)
    second = Observation(120, 2)
    assert rule.feed(20, {A: second}) == []
    assert rule.feed(29, {A: second}) == []
    assert rule.feed(30, {A: second}) == [A]


def test_each_path_has_its_own_window_and_a_vanished_one_is_forgotten():
    rule = Stability(window_s=10)
    a, b = Observation(1, 1), Observation(2, 2)
    rule.feed(0, {A: a})
    assert rule.feed(5, {A: a, B: b}) == []
    assert rule.feed(10, {A: a, B: b}) == [A]
    assert rule.feed(15, {A: a, B: b}) == [A, B]
    rule.feed(16, {B: b})  # A deleted (a rotation): forgotten
    assert rule.feed(17, {A: a, B: b}) == [B]
    assert rule.feed(27, {A: a, B: b}) == [A, B]


def test_a_final_pass_takes_what_its_exited_writer_left_without_the_window():
    rule = Stability(window_s=10)
    rule.feed(0, {A: Observation(100, 1)})
    rule.registered(A, Observation(100, 1))
    seen = {A: Observation(100, 1), B: Observation(50, 2)}  # B first seen now
    assert rule.feed(1, seen) == []
    assert rule.feed(1.5, seen, final=True) == [B]  # A was taken already: not again
    rule.registered(B, seen[B])
    assert rule.feed(2, seen, final=True) == [] and rule.pending() == 0
