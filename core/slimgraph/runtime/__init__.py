"""What an ingestion does to the process around it, and undoes after.

- :mod:`~slimgraph.runtime.gcpause`: one counted pause (and freeze) of the
  cyclic garbage collector, shared by ingestions and measurements;
- :mod:`~slimgraph.runtime.gcpolicy`: the ``slimgraph.gc`` setting applied
  around an ingestion;
- :mod:`~slimgraph.runtime.switching`: a shorter GIL switch interval while
  an ingestion works in a thread;
- :mod:`~slimgraph.runtime.threads`: the threads an ingestion's steps run
  in, off the event loop (its own, not distributed's one offload thread);
- :mod:`~slimgraph.runtime.disposal`: an ingestion's big temporaries freed
  in steps, off the event loop;
- :mod:`~slimgraph.runtime.finalizers`: the finalizers a frozen collector
  holds back (dask's Graph page removing its plugin), run when stock's
  collector would run them.
"""
