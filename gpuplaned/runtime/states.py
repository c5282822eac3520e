"""Actor states and the transitions allowed between them.

Theory of operation: supervisord's process vocabulary, driven by the supervisor.

    STOPPED --start--> STARTING --startsecs of uptime--> RUNNING
    STARTING/RUNNING --crash, budget left--> BACKOFF --delay--> STARTING
    STARTING/RUNNING --crash, budget spent--> FATAL
    STARTING/RUNNING --returned, no restart--> EXITED
    STARTING/RUNNING/BACKOFF --stop--> STOPPING --> STOPPED
    EXITED/FATAL/STOPPED --start--> STARTING

This module imports nothing, so the table can be read and tested on its own.
"""

import enum


class ActorState(enum.Enum):
    STOPPED = "STOPPED"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    BACKOFF = "BACKOFF"
    STOPPING = "STOPPING"
    EXITED = "EXITED"
    FATAL = "FATAL"


_S = ActorState

ALLOWED_TRANSITIONS: dict[ActorState, frozenset[ActorState]] = {
    _S.STOPPED: frozenset({_S.STARTING}),
    _S.STARTING: frozenset({_S.RUNNING, _S.BACKOFF, _S.FATAL, _S.EXITED, _S.STOPPING}),
    _S.RUNNING: frozenset({_S.BACKOFF, _S.FATAL, _S.EXITED, _S.STOPPING}),
    _S.BACKOFF: frozenset({_S.STARTING, _S.STOPPING}),
    _S.STOPPING: frozenset({_S.STOPPED}),
    _S.EXITED: frozenset({_S.STARTING}),
    _S.FATAL: frozenset({_S.STARTING}),
}

# States in which an actor's task is alive (or about to be started again).
ACTIVE_STATES = frozenset({_S.STARTING, _S.RUNNING, _S.BACKOFF})


class InvalidTransition(Exception):
    def __init__(self, current: ActorState, new: ActorState) -> None:
        super().__init__(f"actor cannot go from {current.value} to {new.value}")
        self.current = current
        self.new = new


def check_transition(current: ActorState, new: ActorState) -> None:
    if new not in ALLOWED_TRANSITIONS[current]:
        raise InvalidTransition(current, new)
