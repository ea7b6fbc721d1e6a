"""A graph's life on the scheduler after its arrival (ingestion is
:mod:`slimgraph.ingest`):

- :mod:`~slimgraph.life.release`: a client's release or cancel of a big
  graph, in slices on the event loop (:mod:`slimgraph.runtime.loopwork`).
"""
