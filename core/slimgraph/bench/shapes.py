"""``python -m slimgraph bench --mode shapes``: the shapes users submit, one table.

The other modes measure one workload at a time; real users submit many
kinds of graph: a ``client.map`` over plain values, over futures, with a
future as a keyword, dataframes grouped, merged and shuffled with P2P, a
bag, an array through ``map_blocks``/``blockwise``, graphs on persisted
inputs, and several clients submitting many small graphs at once. Each
takes a different path through ``update_graph`` (one layer or many,
dependencies on keys already in memory, a submission per small graph), so
each can be faster, slower or different on the slim engine. This mode
runs them all, stock and slim in the same run, each engine in a cluster of
its own (a real scheduler process and ``--workers`` worker processes,
:func:`slimgraph.bench.processes.cluster_processes`, as client mode), and
submits the shapes there in turn, each computed to the end.

Per shape and engine it reads the scheduler's records of the shape's
submissions (those after a mark taken just before the shape submits; its
inputs, computed beforehand, come before the mark) and reports
update_graph's seconds (summed over the submissions), RSS growth per task,
the engine's own longest loop block (``block_causes["ingestion"]``, kept
for blocks of at least 50 ms) and the record's longest block (the largest
over the submissions), how the ready tasks went out (``sent_in_slices``),
the task count and the result. The results of the two engines are
compared: the same graph must compute the same value on either.

Every builder here is sized by about ``n`` tasks; the functions in the
graphs are this module's (workers import them by reference, as
:mod:`slimgraph.workloads`'s).

JSON (``--json PATH``)::

    {"mode": "shapes", "requested_tasks", "workers", "shapes": [SHAPE]}

    SHAPE = {"shape", "same_result", "stock": RUN, "slim": RUN,
             "ratios": {"update_graph_seconds", "rss_bytes_per_task"}}
    RUN = {"tasks", "submissions", "update_graph_seconds", "rss_bytes_per_task",
           "ingestion_block_seconds" (None: no block of its own of >= 50 ms),
           "longest_block_seconds", "sent_in_slices" (the records' that are
           not None), "ingestion" (how each submission was ingested, counted),
           "wall_seconds" (from the mark until the result was back), "result"
           (its repr, cut at 200 characters)}
"""
from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any, Callable

KINDS = ("stock", "slim")
#: the inputs the map shapes' tasks depend on
MAP_INPUTS = 100
#: clients of the many-clients shape, and about how many tasks in each of its graphs
CLIENTS = 4
SMALL_GRAPH_TASKS = 50
MAX_SMALL_GRAPHS = 100


# -- the functions in the graphs (module-level: the workers import them) --

def _triple(x: int) -> int:
    return 3 * x


def _plus(x: int, y: int) -> int:
    return x + y


def _shifted(x: int, offset: int = 0) -> int:
    return x + offset


def _scale_block(block: Any, factor: int) -> Any:
    return block * factor


def _frame(i: int, width: int = 8) -> Any:
    """Partition ``i`` of the dataframe shapes: a key column ``k`` with many
    values, a small one ``a``, a value ``v``."""
    import pandas as pd

    rows = range(i * width, (i + 1) * width)
    return pd.DataFrame({"k": [r % 997 for r in rows], "a": [r % 4 for r in rows], "v": list(rows)})


def _lookup(i: int) -> Any:
    """Partition ``i`` of the merge's right side: each key once."""
    import pandas as pd

    keys = range(i * 50, min((i + 1) * 50, 997))
    return pd.DataFrame({"k": list(keys), "w": [2 * k for k in keys]})


def _distinct_keys(df: Any) -> Any:
    """How many keys a partition holds: summed over a shuffle's output
    partitions, the number of keys (each key lands in one partition)."""
    import pandas as pd

    return pd.Series([df.k.nunique()])


# -- the shapes: each ``(client, n, mark) -> a plain, comparable value`` --
#
# ``mark()`` is called once the shape's inputs are computed, right before
# the submissions measured; the value is computed to the end.

def map_plain(client: Any, n: int, mark: Callable) -> Any:
    mark()
    return sum(client.gather(client.map(_triple, range(n))))


def _map_inputs(client: Any) -> list:
    from distributed import wait

    inputs = client.map(_triple, range(-MAP_INPUTS, 0))  # (keys apart from the map shape's)
    wait(inputs)
    return inputs


def map_futures(client: Any, n: int, mark: Callable) -> Any:
    inputs = _map_inputs(client)
    mark()
    return sum(client.gather(client.map(_plus, range(n), [inputs[i % MAP_INPUTS] for i in range(n)])))


def map_kwargs(client: Any, n: int, mark: Callable) -> Any:
    inputs = _map_inputs(client)
    mark()
    return sum(client.gather(client.map(_shifted, range(n), offset=inputs[1])))


def dataframe_groupby(client: Any, n: int, mark: Callable) -> Any:
    from slimgraph import workloads

    mark()
    return sorted(client.compute(workloads.dataframe(n)).result().to_dict().items())


def _frames(parts: int) -> Any:
    import dask.dataframe as dd

    return dd.from_map(_frame, range(max(2, parts)))


def dataframe_merge(client: Any, n: int, mark: Callable) -> Any:
    import dask.dataframe as dd

    left = _frames(n // 60)  # (a task shuffle: about 60 tasks per partition)
    right = dd.from_map(_lookup, range(20))
    merged = left.merge(right, on="k", shuffle_method="tasks")
    mark()
    out = client.compute(merged.groupby("a").w.sum()).result()
    return sorted(out.to_dict().items())


def dataframe_p2p_shuffle(client: Any, n: int, mark: Callable) -> Any:
    import pandas as pd

    # (about 7 tasks per partition on the scheduler: P2P transfer, barrier, unpack, ...)
    shuffled = _frames(n // 7).shuffle(on="k", shuffle_method="p2p")
    keys = shuffled.map_partitions(_distinct_keys, meta=pd.Series(dtype="int64")).sum()
    mark()
    return int(client.compute(keys).result())


def bag(client: Any, n: int, mark: Callable) -> Any:
    from slimgraph import workloads

    mark()
    return client.compute(workloads.bag(n)).result()


def map_blocks(client: Any, n: int, mark: Callable) -> Any:
    """A user's function per block, then a second array joined block by
    block, then a reduction (xarray's ``apply_ufunc(dask="parallelized")``
    makes these layers)."""
    import dask.array as da

    from slimgraph.workloads import array_side

    side, chunk = array_side(n), 4
    x = da.ones((side * chunk, side * chunk), chunks=chunk, dtype="int64")
    y = da.map_blocks(_scale_block, x, 3, dtype="int64")
    z = da.blockwise(_plus, "ij", y, "ij", x, "ij", dtype="int64")
    mark()
    return int(client.compute(z.sum()).result())


def persisted(client: Any, n: int, mark: Callable) -> Any:
    from slimgraph.bench.e2e import real_use_collection

    coll = real_use_collection(client, "array", n)  # (its inputs persisted and computed here)
    mark()
    return client.compute(coll).result().tolist()


def _small_tree(n: int, base: int) -> Any:
    """About ``n`` tasks of increments summed in pairs; ``base`` sets the
    keys apart (every task is pure)."""
    from dask import delayed

    xs = [delayed(_triple, pure=True)(base + i) for i in range(max(2, n // 2))]
    while len(xs) > 1:
        xs = [delayed(_plus, pure=True)(*xs[i:i + 2]) if i + 1 < len(xs) else xs[i]
              for i in range(0, len(xs), 2)]
    return xs[0]


def many_clients(client: Any, n: int, mark: Callable) -> Any:
    """``CLIENTS`` clients, each in a thread of its own, each submitting its
    share of small graphs one ``compute`` call after another without
    waiting, then gathering them."""
    from distributed import Client

    # (at most MAX_SMALL_GRAPHS per client, bigger graphs beyond: the
    # scheduler keeps its last 512 records, slimgraph.history-length)
    graphs = min(MAX_SMALL_GRAPHS, max(2, n // (CLIENTS * SMALL_GRAPH_TASKS)))
    size = max(SMALL_GRAPH_TASKS, n // (CLIENTS * graphs))
    others = [Client(client.scheduler.address, set_as_default=False, timeout="60s")
              for _ in range(CLIENTS)]
    results: list = [None] * CLIENTS

    def submit(i: int) -> None:
        c = others[i]
        futs = [c.compute(_small_tree(size, (i * graphs + g) * size))
                for g in range(graphs)]
        results[i] = c.gather(futs)

    try:
        mark()
        threads = [threading.Thread(target=submit, args=(i,), name=f"shapes-client-{i}")
                   for i in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for c in others:
            c.close()
    if any(r is None for r in results):
        raise RuntimeError("a client of the many-clients shape failed (its traceback is above)")
    return results


SHAPES: dict[str, Callable] = {
    "map": map_plain,
    "map-futures": map_futures,
    "map-kwargs": map_kwargs,
    "dataframe-groupby": dataframe_groupby,
    "dataframe-merge": dataframe_merge,
    "dataframe-p2p-shuffle": dataframe_p2p_shuffle,
    "bag": bag,
    "map-blocks": map_blocks,
    "persisted": persisted,
    "many-clients": many_clients,
}


def parse_shapes(text: str | None) -> list:
    """``a,b,...`` as a list of shape names (all of them for None), or a
    ValueError naming the unknown ones."""
    if not text:
        return list(SHAPES)
    names = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in names if s not in SHAPES]
    if unknown or not names:
        raise ValueError(f"unknown shape(s) {', '.join(unknown) or text!r}; choose from {', '.join(SHAPES)}")
    return names


# -- measuring --

def _last_id(client: Any) -> int:
    """The newest submission id the scheduler has a record of (0: none
    yet): the mark. (The largest, not the last: stock's records are kept
    when their update_graph ends, in the order they end.)"""
    from slimgraph.instrument.client import get_submissions

    return max((r.submission_id for r in get_submissions(client)), default=0)


def _records_since(client: Any, mark: int, timeout: float = 300) -> list:
    """The records after ``mark``, once none is running and every commit's
    ready tasks left to send in slices are sent."""
    from slimgraph.bench.e2e import _final_record
    from slimgraph.instrument.client import get_submissions

    deadline = time.time() + timeout
    recs = get_submissions(client, since=mark)
    while any(r.status == "running" for r in recs) and time.time() < deadline:
        time.sleep(0.2)
        recs = get_submissions(client, since=mark)
    return [_final_record(client, r) if (r.sent_in_slices or {}).get("done") is False else r
            for r in recs]


def figures(recs: list) -> dict:
    """One engine's figures of a shape, from its records (summed or the
    largest over its submissions, see the module docstring)."""
    if not recs:
        raise RuntimeError("no update_graph record after the mark")
    bad = [r for r in recs if r.status != "OK"]
    if bad:
        raise RuntimeError(f"update_graph {bad[0].status}: {bad[0].error}")
    tasks = sum(r.tasks for r in recs)
    grown = [r.rss_after - r.rss_before for r in recs if r.rss_before is not None and r.rss_after is not None]
    own = [((r.block_causes or {}).get("ingestion") or {}).get("seconds") for r in recs]
    blocks = [r.longest_block_s for r in recs if r.longest_block_s is not None]
    ingestion: dict = {}
    for r in recs:
        how = r.ingestion or "-"  # (stock records leave it unset)
        ingestion[how] = ingestion.get(how, 0) + 1
    return {
        "tasks": tasks,
        "submissions": len(recs),
        "update_graph_seconds": sum(r.total_s for r in recs),
        "rss_bytes_per_task": sum(grown) / tasks if grown and tasks else None,
        "ingestion_block_seconds": max((s for s in own if s is not None), default=None),
        "longest_block_seconds": max(blocks, default=None),
        "sent_in_slices": [r.sent_in_slices for r in recs if r.sent_in_slices],
        "ingestion": ingestion,
    }


def run_shape(client: Any, name: str, n: int) -> tuple:
    """``(figures, value)`` of shape ``name`` on ``client``'s cluster."""
    marks: list = []
    t0 = [0.0]

    def mark() -> None:
        marks.append(_last_id(client))
        t0[0] = time.time()

    value = SHAPES[name](client, n, mark)
    wall = time.time() - t0[0]
    if len(marks) != 1:
        raise RuntimeError(f"shape {name} marked {len(marks)} times, not once")
    out = figures(_records_since(client, marks[0]))
    out["wall_seconds"] = wall
    out["result"] = repr(value)[:200]
    return out, value


def run_engine(kind: str, names: list, n: int, workers: int, say: Callable) -> tuple:
    """Every shape on one engine's cluster: ``({shape: figures}, {shape: value})``."""
    from distributed import Client

    from slimgraph.bench.processes import cluster_processes
    from slimgraph.instrument.client import install

    runs: dict = {}
    values: dict = {}
    with cluster_processes(kind, workers) as cluster, \
            Client(scheduler_file=cluster.scheduler_file, timeout="60s") as client:
        client.wait_for_workers(workers, timeout=120)
        install(client)
        for name in names:
            say(f"{kind}: {name}")
            runs[name], values[name] = run_shape(client, name, n)
            r = runs[name]
            say(f"{kind}: {name}: {r['tasks']:,} tasks in {r['submissions']} submission(s), "
                f"update_graph {r['update_graph_seconds']:.2f} s, computed in {r['wall_seconds']:.1f} s")
    return runs, values


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def bench_shapes(tasks: int, names: list | None = None, workers: int = 2,
                 json_path: str | None = None) -> dict:
    """Stock, then slim, every shape of ``names`` (all by default)."""
    def say(msg: str) -> None:
        print(f"  {msg}", file=sys.stderr, flush=True)

    names = names or list(SHAPES)
    done = {kind: run_engine(kind, names, tasks, workers, say) for kind in KINDS}
    rows = []
    for name in names:
        st, sl = done["stock"][0][name], done["slim"][0][name]
        rows.append({
            "shape": name,
            "same_result": done["stock"][1][name] == done["slim"][1][name],
            "stock": st,
            "slim": sl,
            "ratios": {k: _ratio(st[k], sl[k]) for k in ("update_graph_seconds", "rss_bytes_per_task")},
        })
    result = {"mode": "shapes", "requested_tasks": tasks, "workers": workers, "shapes": rows}
    if json_path:
        with open(json_path, "w") as f:
            json.dump(result, f, indent=1)
    return result


def _cell(v: Any, spec: str, none: str = "-") -> str:
    return none if v is None else format(v, spec)


def format_shapes_table(result: dict) -> str:
    """The table: per shape its tasks (slim's record), update_graph stock,
    slim and the ratio, B/task stock and slim, slim's own longest block,
    how slim sent the ready tasks, and whether the results are equal."""
    head = (f"{'shape':<22}{'tasks':>9}{'update_graph s':>16}{'':>8}{'stock/':>8}"
            f"{'B/task':>9}{'':>8}{'slim own':>10}  {'slim: ready tasks':<26}{'equal':>6}")
    sub = (f"{'':<22}{'':>9}{'stock':>16}{'slim':>8}{'slim':>8}"
           f"{'stock':>9}{'slim':>8}{'block ms':>10}  {'sent':<26}{'':>6}")
    out = [f"shapes, about {result['requested_tasks']:,} tasks each, computed to the end "
           f"(scheduler process, {result['workers']} worker processes per engine)", head, sub]
    for row in result["shapes"]:
        st, sl = row["stock"], row["slim"]
        ratio = row["ratios"]["update_graph_seconds"]
        own = sl["ingestion_block_seconds"]
        out.append(
            f"{row['shape']:<22}{sl['tasks']:>9,}{st['update_graph_seconds']:>16.3f}"
            f"{sl['update_graph_seconds']:>8.3f}{_cell(ratio, '.2f') + ('x' if ratio else ''):>8}"
            f"{_cell(st['rss_bytes_per_task'], ',.0f'):>9}{_cell(sl['rss_bytes_per_task'], ',.0f'):>8}"
            f"{'<50' if own is None else format(own * 1e3, ',.0f'):>10}  {sent(sl):<26}"
            f"{'yes' if row['same_result'] else 'NO':>6}")
    if any(r["stock"]["tasks"] != r["slim"]["tasks"] for r in result["shapes"]):
        out.append("tasks differ between the engines for: " + ", ".join(
            f"{r['shape']} (stock {r['stock']['tasks']:,})" for r in result["shapes"]
            if r["stock"]["tasks"] != r["slim"]["tasks"]))
    out.append("slim own block: the engine's own longest loop block while it ingested "
               "(<50: none of 50 ms or more)")
    return "\n".join(out)


def sent(run: dict) -> str:
    """How a run's ready tasks went out: in the commit, or the tasks left
    to send after it and in how many slices (and how many in bulk)."""
    tails = run.get("sent_in_slices") or []
    if not tails:
        return "in the commit"
    tasks = sum(t.get("tasks", 0) for t in tails)
    slices = sum(t.get("slices", 0) for t in tails)
    bulk = sum(t.get("in_bulk", 0) or 0 for t in tails)
    how = " (bulk)" if bulk == tasks else f" ({bulk:,} bulk)" if bulk else ""
    return f"{tasks:,} in {slices} slices{how}"
