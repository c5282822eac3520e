"""The detector's rules (seed 000 section 10.1): pure functions of a stream window and the
rule's state, returning the new state and the events to raise.

Each rule keeps its open episode in its state, so the same event is never raised twice for
one episode; the episode closes when the condition clears, and a later one raises again.
Where each rule runs, one implementation each:

- LOSS_NAN, LOSS_SPIKE: ``gpuplaned.domain.run_summary`` (the ingest's summary fold, which
  already sees every point in the batch's transaction).
- OVERFITTING_SUSPECTED: ``overfitting``, called from the same fold.
- RUN_STALLED: ``stall``, run by the server's ``detector`` actor (it needs a clock).
- RUN_STARTED, RUN_FINISHED: ``lifecycle``, by the same actor from the runs table.
- DISK_LOW, GPU_UNDERUTILIZED, GPU_LOST: ``gpuplaned.domain.node_health``, on every monitor
  sample on the node (the raw GPU readings never need to cross the link for them).
- OOM, JOB_FAILED, JOB_LOST, AGENT_DISCONNECTED: the job and node paths
  (``gpuplaned.domain.failures``, ``gpuplaned.service.link.nodes``).

``evidence`` builds the pointers every event's context carries (``context["evidence"]``).
"""
