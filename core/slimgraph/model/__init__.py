"""The scheduler-side data model on slim parts.

- :mod:`~slimgraph.model.taskstate`: ``SlimTaskState``, a slotted drop-in
  for distributed's TaskState (14 slots instead of 34; rare attributes in
  one side object);
- :mod:`~slimgraph.model.containers`: the compact, copy-on-write edge
  containers those task states hold;
- :mod:`~slimgraph.model.keys`: one canonical key per task, and group and
  prefix names resolved once per name;
- :mod:`~slimgraph.model.queue`: ``TaskQueue``, the queue of runnable
  root-ish tasks without per-entry objects;
- :mod:`~slimgraph.model.state`: ``SlimSchedulerState``, distributed's
  state machine running on all of the above.

Nothing here does I/O or knows about graph submissions; the ingestion
pipeline (:mod:`slimgraph.ingest`) builds these objects in bulk.
"""
