"""The benchmark command: stock vs slim on the same pickled submission.

``python -m slimgraph bench --workload array --tasks 1000000`` builds the
graph once (:mod:`slimgraph.workloads`), captures the exact ``update-graph`` payload a
real Client sends (:mod:`.payload`), then runs stock and slim each in a fresh
subprocess (:mod:`.child`) and prints one table with ratios (:mod:`.runner`).
"""
