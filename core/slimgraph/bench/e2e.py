"""``python -m slimgraph bench --mode client``: end to end, through a real Client.

The engine benchmark (:mod:`slimgraph.bench.runner`) replays one pickled
submission into ``update_graph`` of an in-process scheduler without workers:
it isolates the scheduler's own cost. This mode measures what a user sees.
For each kind (stock, then slim, same run, same workload):

1. start a real scheduler process (``dask scheduler``; the slim one with
   ``--preload slimgraph.distributed``, the drop-in) and ``--workers``
   single-threaded worker processes (``dask worker``);
2. connect a :class:`distributed.Client`, install the recorder (stock's
   ``update_graph`` is instrumented from outside, see
   :mod:`slimgraph.instrument.stock_recorder`);
3. while a second connection pings the scheduler every 20 ms (``identity``,
   a plain RPC: the latency another client or a heartbeat sees), submit the
   collection with ``client.compute`` and wait for the result, or with
   ``compute_seconds`` only that long after the submission returned, then
   cancel (computing a big graph on a few workers takes far longer than
   ingesting it; what follows an ingestion, such as a first garbage
   collection, still falls in the pinged window). Other users' figures count what was answered by
   the cut (the end of the computation, or the moment before the bench
   reads the state counts and cancels: its own walks of the scheduler's
   tasks on the loop are not what a user meets).

Reported per kind: end-to-end submit time (``compute`` call to the end of
the scheduler's ``update_graph``), the update_graph phases and total,
the longest event-loop block (scheduler-side loop monitor) and the longest
ping latency (client side), scheduler RSS growth per task over the
submission, and the time until the result is back on the client (the graph
computed on the workers).

JSON (``--json PATH``)::

    {"mode": "client", "workload", "requested_tasks", "tasks", "workers",
     "stock": RUN, "slim": RUN, "ratios": {...}}

    RUN = {"submit_seconds", "update_graph_seconds", "phases": {name: s},
           "longest_block_seconds", "phase_blocks", "ingestion_block_seconds"
           (the longest block that was the engine's own: its code on the loop
           or its thread holding the GIL), "block_causes" (the record's),
           "window_block_causes" / "cancel_block_causes" (every block of
           >= 50 ms until the cut / of the cancel, the longest per cause:
           see slimgraph.instrument.blame), "ingestion_blocks" (the ten
           longest of the ingestion's own until the cut: seconds, label),
           "longest_ping_seconds",
           "longest_ping" (where it went: see :func:`longest_ping`),
           "rss_bytes_per_task", "compute_seconds" (None when cut short),
           "cancel_answer_seconds" (when cut short: from the cancel until the
           scheduler answers without the graph's key), "cancel_release_seconds"
           (until the scheduler's loop first saw the key gone),
           "cancel_task_states" (state -> tasks, just before the cancel), "cut_seconds"
           (after the submission: other users' figures end there), "sent_in_slices"
           (slim: the record's),
           "tasks", "result"}
"""
from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any

KINDS = ("stock", "slim")
#: how the load opens dask's dashboard pages (see :class:`_Load`)
PAGES = ("reload", "browser")
#: between the load's pages opening and the submission (see ``run_kind``)
PAGES_SETTLE_SECONDS = 3.0


class _Load:
    """What other users of the scheduler see while it ingests: in processes
    of their own (the submitting client's process pickles the graph, holding
    its GIL for seconds: a thread there measured that, not the scheduler),
    each with its own event loop. The pinger has a process to itself:
    sharing one with the browser's driver and the second client, its round
    trips also measured that process's own turns (a page finishing loading
    made long pings while the scheduler's loop was not blocked at all).

    - a second connection asks the scheduler for ``identity`` every
      ``interval`` seconds (a plain RPC: the latency another client or a
      heartbeat sees);
    - a second Client submits a one-task graph every ``submit_every``
      seconds, at a high priority (it runs before the big graph's tasks),
      and waits for its result;
    - it opens the scheduler's own dashboard pages: ``/graph`` once (its
      plugin lays out every task it is told of), then at once ``/status``,
      and ``/status`` again every ``dashboard_every`` seconds (each load
      builds a Bokeh session on the scheduler's loop, as a browser opening
      the page does). The first
      loads register the plugins dask's dashboard adds (task stream, graph
      layout), as a user with those pages open has them. With
      ``pages="browser"`` a headless Chromium opens the two pages once and
      keeps them open instead: their periodic updates come over the pages'
      websockets, as for a user who looks at them (no page is built again;
      ``reload``, the default, also measures the cost of building one).

    Each kind keeps ``(time.time() at start, seconds)`` per round trip.
    ``nice``: the browser runs at this niceness (see ``run_kind``).
    """

    def __init__(self, address: str, dashboard: str | None, interval: float = 0.02,
                 submit_every: float = 0.5, dashboard_every: float = 5.0,
                 pages: str = "reload", nice: int = 0):
        import multiprocessing

        if pages not in PAGES:
            raise ValueError(f"pages must be one of {PAGES}, not {pages!r}")

        ctx = multiprocessing.get_context("spawn")
        self.pings: list = []
        self.submits: list = []
        self.pages: list = []
        self._stop = ctx.Event()
        self._pages_loaded = ctx.Value("i", 0)
        self._pinged = ctx.Value("i", 0)
        self._pipes: list = []
        self._procs: list = []
        parts = [("slimgraph-ping", ("ping",))]
        if submit_every or dashboard:
            parts.append(("slimgraph-load", ("submit", "pages")))
        for name, roles in parts:
            recv, send = ctx.Pipe(duplex=False)
            self._pipes.append(recv)
            self._procs.append(ctx.Process(
                target=_load_main, name=name, daemon=True,
                args=(address, dashboard, interval, submit_every, dashboard_every,
                      self._stop, self._pages_loaded, send, pages, roles, nice, self._pinged)))

    @property
    def running(self) -> bool:
        """Whether the load's processes are all still running."""
        return all(p.is_alive() for p in self._procs)

    @property
    def pages_loaded(self) -> int:
        """Dashboard page loads finished so far (while it runs)."""
        return self._pages_loaded.value

    def wait_pinging(self, timeout: float = 60) -> None:
        """Until the pinger's first round trip is back (its process imports
        distributed first: a second or two in which nothing is measured)."""
        deadline = time.time() + timeout
        while self._pinged.value == 0:
            if not self.running or time.time() > deadline:
                raise RuntimeError("the ping process did not reach the scheduler")
            time.sleep(0.05)

    def __enter__(self) -> "_Load":
        for p in self._procs:
            p.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        for recv in self._pipes:
            if recv.poll(180):
                got = recv.recv()
                self.pings += got["pings"]
                self.submits += got["submits"]
                self.pages += got["pages"]
        for p in self._procs:
            p.join(timeout=30)
            if p.is_alive():
                p.terminate()


def _load_main(address: str, dashboard: str | None, interval: float, submit_every: float,
               dashboard_every: float, stop: Any, pages_loaded: Any, send: Any,
               pages: str = "reload", roles: tuple = ("ping", "submit", "pages"),
               nice: int = 0, pinged: Any = None) -> None:
    """A load process: runs ``roles`` until ``stop`` is set, then sends what
    it saw."""
    run = _LoadRun(address, dashboard, interval, submit_every, dashboard_every, stop, pages_loaded,
                   pages, roles, nice, pinged)
    try:
        asyncio.run(run._run())
    finally:
        send.send({"pings": run.pings, "submits": run.submits, "pages": run.pages})
        send.close()


class _LoadRun:
    """The load's loops, in the load process (see :class:`_Load`)."""

    def __init__(self, address: str, dashboard: str | None, interval: float, submit_every: float,
                 dashboard_every: float, stop: Any, pages_loaded: Any, pages: str = "reload",
                 roles: tuple = ("ping", "submit", "pages"), nice: int = 0, pinged: Any = None):
        self.address = address
        self._pinged = pinged
        self.roles = roles
        self.nice = nice
        self.pages_mode = pages
        self.dashboard = dashboard
        self.interval = interval
        self.submit_every = submit_every
        self.dashboard_every = dashboard_every
        self.pings: list = []
        self.submits: list = []
        self.pages: list = []
        self._stop = stop
        self._pages_loaded = pages_loaded

    async def _run(self) -> None:
        tasks = []
        if "ping" in self.roles:
            tasks.append(asyncio.create_task(self._ping()))
        if "submit" in self.roles and self.submit_every:
            tasks.append(asyncio.create_task(self._submit()))
        if "pages" in self.roles and self.dashboard:
            if self.pages_mode == "browser":
                tasks.append(asyncio.create_task(self._browser()))
            elif self.dashboard_every:
                tasks.append(asyncio.create_task(self._dashboard()))
        await asyncio.gather(*tasks)

    async def _ping(self) -> None:
        """``(time.time() at start, seconds, of it seconds this pinger
        waited for a CPU)`` per round trip: on a machine whose cores also
        run the scheduler, its workers and the client, the pinger itself is
        sometimes not run when the answer comes (read from the kernel's
        run-queue clock of this thread, where Linux has one, else 0)."""
        import threading

        from distributed.core import rpc

        from slimgraph.instrument.blame import RunQueueClocks

        clocks = RunQueueClocks()
        me = threading.get_ident()

        def waited() -> float:
            return clocks.read(only=me).get(me, 0.0)

        r = rpc(self.address)
        try:
            while not self._stop.is_set():
                q, t, w = waited(), time.perf_counter(), time.time()
                await r.identity()
                self.pings.append((w, time.perf_counter() - t, waited() - q))
                if self._pinged is not None and self._pinged.value == 0:
                    self._pinged.value = 1
                await asyncio.sleep(self.interval)
        finally:
            await r.close_rpc()

    async def _submit(self) -> None:
        import operator

        from distributed import Client

        async with Client(self.address, asynchronous=True, name="slimgraph-load") as c:
            i = 0
            while not self._stop.is_set():
                t, w = time.perf_counter(), time.time()
                fut = c.submit(operator.add, i, 1, key=f"slimgraph-load-{i}", priority=1000)
                # (up to 120 s, but a stop does not wait for it: the bench
                # times the cancel after the load has stopped, and a submit
                # still waiting then is not a round trip seen)
                # one waiter, looked at every 0.1 s (a waiter per look left
                # one task per look behind, each ending in an error nobody
                # read once the future was released: a traceback per look
                # for as long as the scheduler's loop was blocked)
                waiter = asyncio.ensure_future(fut.result())
                while not waiter.done() and not self._stop.is_set() and time.perf_counter() - t < 120:
                    await asyncio.wait({waiter}, timeout=0.1)
                done = waiter.done() and not waiter.cancelled() and waiter.exception() is None
                if done or not self._stop.is_set():
                    self.submits.append((w, time.perf_counter() - t))
                if not waiter.done():
                    waiter.cancel()
                    await asyncio.wait({waiter})
                fut.release()
                i += 1
                await asyncio.sleep(self.submit_every)

    async def _dashboard(self) -> None:
        import urllib.request

        def get(url: str) -> int:
            with urllib.request.urlopen(url, timeout=120) as r:
                r.read()
                return r.status

        loop = asyncio.get_running_loop()
        i = 0
        while not self._stop.is_set():
            url = f"{self.dashboard}/{'graph' if i == 0 else 'status'}"
            t, w = time.perf_counter(), time.time()
            try:
                code = await loop.run_in_executor(None, get, url)
            except Exception:  # noqa: BLE001 - a failed load is what we report
                code = 0
            self.pages.append((w, time.perf_counter() - t, code))
            self._pages_loaded.value = len(self.pages)
            i += 1
            if i > 1:  # (the Graph and the Status page open together, as two tabs do)
                await asyncio.sleep(self.dashboard_every)

    async def _browser(self) -> None:
        """``/graph`` and ``/status`` opened once in a headless Chromium, in
        two tabs kept open until the stop (``(time.time(), seconds to the
        page's load event, HTTP status)`` per page; 0 if it failed or
        raised a JavaScript error)."""
        from playwright.async_api import async_playwright

        from slimgraph.bench.browser import launch_browser

        async with async_playwright() as pw:
            browser = await launch_browser(pw, self.nice)
            try:
                for name in ("graph", "status"):
                    page = await browser.new_page()
                    errors: list = []
                    page.on("pageerror", lambda e, errors=errors: errors.append(e))
                    t, w = time.perf_counter(), time.time()
                    try:
                        r = await page.goto(f"{self.dashboard}/{name}", wait_until="load",
                                            timeout=120_000)
                        code = r.status if r is not None and not errors else 0
                    except Exception:  # noqa: BLE001 - a failed load is what we report
                        code = 0
                    self.pages.append((w, time.perf_counter() - t, code))
                    self._pages_loaded.value = len(self.pages)
                while not self._stop.is_set():
                    await asyncio.sleep(0.2)
            finally:
                await browser.close()


def distribution(values: list) -> dict | None:
    """Median, 99th percentile and maximum of ``values`` (None if empty)."""
    if not values:
        return None
    import numpy as np

    a = np.asarray(values, dtype=float)
    return {"n": int(a.size), "median": float(np.median(a)), "p99": float(np.percentile(a, 99)),
            "max": float(a.max())}


def real_use_collection(client: Any, workload: str, tasks: int) -> Any:
    """``workload`` as users submit it after some work: on inputs already on
    the cluster (persisted for the array, scattered futures for the delayed
    tree). Each is computed before this returns."""
    from distributed import wait

    from slimgraph import workloads

    if workload == "array":
        inputs = client.persist(workloads.array_inputs(tasks))
        wait(inputs)
        return workloads.array(tasks, offset=inputs)
    if workload == "delayed":
        return workloads.delayed(tasks, inputs=client.scatter(list(range(64))))
    raise ValueError(f"--real-use supports the array and delayed workloads, not {workload!r}")


def run_kind(kind: str, workload: str, tasks: int, workers: int = 2,
             progress: Any = None, compute_seconds: float | None = None, load: bool = True,
             real_use: bool = False, pages: str = "reload", nice: int = 0) -> dict:
    """One kind, end to end, in fresh scheduler and worker processes.
    ``load``: besides the pings, a second client's submissions, dashboard
    page loads and the workers' heartbeat gaps (see :class:`_Load`).
    ``real_use``: the graph depends on persisted inputs
    (:func:`real_use_collection`) and is computed inside a
    ``distributed.span``. ``pages``: how the load opens dask's dashboard
    pages (``reload``: ``/status`` built again every 5 s; ``browser``: both
    pages open in a headless Chromium). ``nice``: the worker processes and
    the load's browser run at this niceness, as on a cluster where they do
    not share the scheduler's cores (on this machine's two cores, two busy
    workers and a browser otherwise leave the scheduler's loop, and the
    pinger, waiting for a CPU: ``no CPU`` blocks, the same for both
    engines). The scheduler, the client and the pinger are not
    niced."""
    import contextlib

    from distributed import Client, span, wait

    from slimgraph.bench.processes import cluster_processes
    from slimgraph.instrument.client import get_submissions, install
    from slimgraph.workloads import WORKLOADS

    say = progress or (lambda msg: None)
    with cluster_processes(kind, workers, nice) as cluster:
        sfile = cluster.scheduler_file
        with Client(scheduler_file=sfile, timeout="60s") as client:
            client.wait_for_workers(workers, timeout=120)
            niceness = sorted(client.run(os.nice, 0).values())
            install(client)
            from slimgraph.instrument import heartbeats

            client.run_on_scheduler(heartbeats.watch)
            dash = client.dashboard_link.rsplit("/", 1)[0] if load else None
            coll = (real_use_collection(client, workload, tasks) if real_use
                    else WORKLOADS[workload](tasks))
            say(f"{kind}: submitting")
            with _Load(client.scheduler.address, dash, submit_every=0.5 if load else 0,
                       pages=pages, nice=nice) as ping:
                ping.wait_pinging()
                while load and ping.pages_loaded < 2:  # the dashboard pages are open first
                    if not ping.running:
                        raise RuntimeError("the load process ended before dask's dashboard pages "
                                           "were open (its traceback is above)")
                    time.sleep(0.1)
                if load:
                    # a user opens the pages, then submits: a Status page
                    # pulls its first updates after its load event (slow
                    # pings on either engine, with no tasks yet)
                    time.sleep(PAGES_SETTLE_SECONDS)
                # this client's earlier submissions (the inputs) are not the one measured
                seen = len([r for r in get_submissions(client) if r.client == client.id])
                t0 = time.time()
                with span("slimgraph-bench") if real_use else contextlib.nullcontext():
                    fut = client.compute(coll)
                rec = None
                while rec is None:
                    time.sleep(0.2)
                    recs = [r for r in get_submissions(client) if r.client == client.id][seen:]
                    rec = recs[0] if recs and recs[0].status != "running" else None
                say(f"{kind}: ingested in {rec.start + rec.total_s - t0:.1f} s, computing")
                cancel_states = None
                if compute_seconds is None:
                    wait(fut)
                    t_done = t_cut = time.time()
                    value = fut.result()
                else:
                    time.sleep(max(0.0, rec.start + rec.total_s + compute_seconds - time.time()))
                    # other users' figures end here: what follows is the
                    # bench's own reading of the scheduler (the state counts
                    # walk every task on its loop) and the
                    # cancel, each a block that a ping still in flight meets
                    t_cut = time.time()
                    t_done = value = None
                    key = fut.key
                    client.run_on_scheduler(_watch_key, key=key)
                    # what the cancel releases: the two engines reach a cut
                    # in different states (stock's ingestion keeps sending
                    # tasks after its record ends), so its figure is read
                    # beside these counts
                    cancel_states = client.run_on_scheduler(_state_counts)
                    t_cancel = time.time()
                    fut.cancel()  # (an RPC: it returns once the scheduler has released the graph)
            cancel_seconds = released_seconds = None
            if t_done is None:
                # releasing the whole graph is a block of its own (stock's
                # transitions; slim also makes the plugin calls still owed):
                # from the cancel until the scheduler answers without the key
                while client.run_on_scheduler(_has_key, key=key) and time.time() - t_cancel < 900:
                    time.sleep(0.05)
                cancel_seconds = time.time() - t_cancel
                # ... and when the scheduler's own loop first saw it gone
                gone = client.run_on_scheduler(_key_gone_at, key=key)
                released_seconds = None if gone is None else gone - t_cancel
            # (after the load: other users' figures cover the submission
            # and the computation, up to the cut, as they always did)
            rec = _final_record(client, rec)
            del fut
            hb = client.run_on_scheduler(heartbeats.gaps)
            # every block of the run with its cause: the submission and what
            # followed (pinged), then the cancel
            cut = t_cut  # (the same cut as other users' figures)
            blocks = client.run_on_scheduler(_loop_blocks, since=t0)
        window = answered_within(ping.pings, t0, t_cut)
        lp = longest_ping(window, blocks, t0)
        if rec.status != "OK":
            raise RuntimeError(f"{kind}: update_graph {rec.status}: {rec.error}")
        rss = None
        if rec.rss_before is not None and rec.rss_after is not None and rec.tasks:
            rss = (rec.rss_after - rec.rss_before) / rec.tasks
        out = {
            "tasks": rec.tasks,
            "submit_seconds": rec.start + rec.total_s - t0,
            "update_graph_seconds": rec.total_s,
            "phases": {p.name: p.wall_s for p in rec.phases},
            "longest_block_seconds": rec.longest_block_s,
            "phase_blocks": {p.name: p.longest_block_s for p in rec.phases},
            # the longest block that was the engine's own ingestion (its code
            # on the loop, or its thread holding the GIL), and per cause
            "ingestion_block_seconds": ((rec.block_causes or {}).get("ingestion") or {}).get("seconds"),
            "block_causes": rec.block_causes,
            "window_block_causes": by_cause([b for b in blocks if b["wall_end"] <= cut]),
            "cancel_block_causes": by_cause([b for b in blocks if b["wall_end"] > cut]),
            "ingestion_blocks": longest_of([b for b in blocks if b["wall_end"] <= cut], "ingestion"),
            "longest_ping_seconds": lp["seconds"] if lp else 0.0,
            "longest_ping": lp,
            "pings": len(window),
            # what other users saw: distributions over the window from the
            # submission to the cut (before it: the pages opening)
            "ping_seconds": distribution([p[1] for p in window]),
            "ping_before_submission_seconds": distribution(
                [p[1] for p in ping.pings if p[0] < t0]),
            "second_client_submit_seconds": distribution([e[1] for e in answered_within(ping.submits, 0.0, t_cut)]),
            "dashboard_page_seconds": distribution([e[1] for e in answered_within(ping.pages, 0.0, t_cut)]),
            "dashboard_page_errors": sum(1 for _, _, code in ping.pages if code != 200),
            "heartbeat_gap_seconds": distribution([g for gs in hb["gaps"].values() for g in gs]),
            "worker_ttl_seconds": hb["worker_ttl"],
            # (time.time(), seconds) of every ping, for a timeline
            "ping_timeline": [(w - t0, d) for w, d, _ in ping.pings],
            # the cut (seconds after the submission): other users' figures
            # count what was answered by then
            "cut_seconds": t_cut - t0,
            # (seconds after the submission at its start, seconds) of every
            # second-client submit, and of every dashboard page load
            "second_client_submit_timeline": [(w - t0, d) for w, d in ping.submits],
            "dashboard_page_timeline": [(w - t0, d) for w, d, _ in ping.pages],
            "rss_bytes_per_task": rss,
            "worker_niceness": niceness,
            "ingestion": rec.ingestion,
            "sent_in_slices": getattr(rec, "sent_in_slices", None),
            "cancel_answer_seconds": cancel_seconds,
            "cancel_release_seconds": released_seconds,
            "cancel_task_states": cancel_states,
            "compute_seconds": None if t_done is None else t_done - t0,
            "result": None if t_done is None else repr(value)[:200],
        }
    return out


def _loop_blocks(since: float, dask_scheduler: Any = None) -> list:
    """The scheduler's attributed loop blocks since ``since`` (time.time())."""
    from slimgraph.instrument.recorder import get_extension

    return get_extension(dask_scheduler).loop_blocks(since)


def answered_within(entries: list, start: float, cut: float) -> list:
    """The ``(sent at, seconds, ...)`` entries sent from ``start`` on and
    answered by ``cut`` (a ping still in flight at the cut meets the
    bench's own reading of the scheduler, then the cancel)."""
    return [e for e in entries if e[0] >= start and e[0] + e[1] <= cut]


def longest_ping(pings: list, blocks: list, t0: float) -> dict | None:
    """Where the longest round trip went: ``{"seconds", "at_seconds" (from
    the submission), "loop_blocked_seconds" (the scheduler's attributed
    loop blocks of >= 50 ms overlapping it), "pinger_cpu_wait_seconds"
    (the pinger waiting for a CPU; see ``_LoadRun._ping``)}``. What is left
    is neither: the network, the scheduler's shorter blocks, the
    scheduler's own waits for a CPU below a block."""
    if not pings:
        return None
    w, d, cpu_wait = max(pings, key=lambda p: p[1])
    blocked = 0.0
    for b in blocks:
        end = b["wall_end"]
        blocked += max(0.0, min(end, w + d) - max(end - b["seconds"], w))
    return {"seconds": d, "at_seconds": w - t0, "loop_blocked_seconds": min(blocked, d),
            "pinger_cpu_wait_seconds": cpu_wait}


def by_cause(blocks: list) -> dict:
    """``{cause: {"seconds", "label", "count"}}``: the longest of ``blocks``
    (``loop_blocks`` dicts) per cause, and how many there were."""
    out: dict = {}
    for b in blocks:
        c = out.setdefault(b["cause"], {"seconds": 0.0, "label": "", "count": 0})
        c["count"] += 1
        if b["seconds"] > c["seconds"]:
            c["seconds"], c["label"] = b["seconds"], b["label"]
    return out


def longest_of(blocks: list, cause: str, n: int = 10) -> list:
    """The ``n`` longest of ``blocks`` with ``cause``: ``[[seconds, label]]``."""
    mine = sorted((b for b in blocks if b["cause"] == cause), key=lambda b: -b["seconds"])
    return [[b["seconds"], b["label"]] for b in mine[:n]]


def _state_counts(dask_scheduler: Any = None) -> dict:
    """How many of the scheduler's tasks are in each state, most first."""
    counts: dict = {}
    for ts in dask_scheduler.tasks.values():
        counts[ts.state] = counts.get(ts.state, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def _has_key(key: Any, dask_scheduler: Any = None) -> bool:
    """Whether the scheduler still has ``key`` (answered when its loop is free)."""
    return key in dask_scheduler.tasks


#: key -> time.time() when the scheduler's loop first saw it gone (in the
#: scheduler's process; see :func:`_watch_key`)
_GONE: dict = {}


def _watch_key(key: Any, dask_scheduler: Any = None) -> None:
    """Note, on the scheduler's loop every 10 ms, when ``key`` is gone: the
    cancel's own duration, whatever the client's process is busy with."""
    async def poll() -> None:
        while key in dask_scheduler.tasks:
            await asyncio.sleep(0.01)
        _GONE[key] = time.time()

    _GONE.pop(key, None)
    task = asyncio.get_running_loop().create_task(poll())
    _GONE.setdefault("_tasks", set()).add(task)  # (kept until it ends)
    task.add_done_callback(_GONE["_tasks"].discard)


async def _key_gone_at(key: Any, dask_scheduler: Any = None) -> float | None:
    """When the watcher saw ``key`` go. Asked once the key is gone: after a
    long block the loop runs the client's request (I/O) before the
    watcher's due timer, so the answer may still be on its way; waits up
    to 2 s for it."""
    for _ in range(200):
        if key in _GONE:
            return _GONE[key]
        await asyncio.sleep(0.01)
    return None


def _final_record(client: Any, rec: Any, timeout: float = 300) -> Any:
    """``rec`` as the scheduler has it once the ready tasks its commit left
    to send in slices are all sent (the record's longest block counts
    those slices too)."""
    from slimgraph.instrument.client import get_submissions

    deadline = time.time() + timeout
    while True:
        now = [r for r in get_submissions(client) if r.submission_id == rec.submission_id]
        if now:
            rec = now[0]
        tail = getattr(rec, "sent_in_slices", None)
        if tail is None or tail.get("done") or time.time() > deadline:
            return rec
        time.sleep(0.5)


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def bench_client(workload: str, tasks: int, workers: int = 2,
                 json_path: str | None = None, compute_seconds: float | None = None,
                 load: bool = True, real_use: bool = False, pages: str = "reload",
                 nice: int = 0, only: str | None = None) -> dict:
    """Stock, then slim (or ``only`` one of them: a size at which the other
    cannot run on this machine, such as stock at 10M tasks; its figures and
    the ratios are then None)."""
    def say(msg: str) -> None:
        print(f"  {msg}", file=sys.stderr, flush=True)

    runs = {kind: run_kind(kind, workload, tasks, workers, say, compute_seconds, load, real_use,
                           pages, nice) if only in (None, kind) else None
            for kind in KINDS}
    st, sl = runs["stock"] or {}, runs["slim"] or {}
    result = {
        "mode": "client",
        "workload": workload,
        "requested_tasks": tasks,
        "tasks": (sl or st)["tasks"],
        "workers": workers,
        "real_use": real_use,
        "dashboard_pages": pages if load else None,
        "background_nice": nice,
        "stock": runs["stock"],
        "slim": runs["slim"],
        "same_result": None if st.get("result") is None or not sl else st["result"] == sl["result"],
        "compute_cut_after_seconds": compute_seconds,
        "ratios": {
            k: _ratio(st.get(k), sl.get(k))
            for k in ("submit_seconds", "update_graph_seconds", "longest_block_seconds",
                      "ingestion_block_seconds", "longest_ping_seconds", "rss_bytes_per_task", "compute_seconds",
                      "cancel_answer_seconds", "cancel_release_seconds")
        },
    }
    if json_path:
        with open(json_path, "w") as f:
            json.dump(result, f, indent=2)
    return result


def format_client_table(result: dict) -> str:
    # (an engine not run, ``--only``: its cells are "-")
    result = dict(result, stock=result["stock"] or {}, slim=result["slim"] or {})
    rows = [
        ("end-to-end submit (s)", "submit_seconds", "{:.2f}"),
        ("update_graph (s)", "update_graph_seconds", "{:.2f}"),
        ("longest loop block (ms)", "longest_block_seconds", "ms"),
        ("  of it the ingestion's own (ms)", "ingestion_block_seconds", "ms"),
        ("longest ping from 2nd client (ms)", "longest_ping_seconds", "ms"),
        ("scheduler RSS growth (B/task)", "rss_bytes_per_task", "{:,.0f}"),
        (f"submit + compute on {result['workers']} workers (s)", "compute_seconds", "{:.2f}"),
        ("cancel -> key released, scheduler-side (s)", "cancel_release_seconds", "{:.2f}"),
        ("cancel -> key released, answered (s)", "cancel_answer_seconds", "{:.2f}"),
    ]

    def fmt(v: Any, spec: str) -> str:
        if v is None:
            return "-"
        if spec == "ms":
            return f"{v * 1e3:,.1f}"
        return spec.format(v)

    out = [f"{result['workload']}: {result['tasks']:,} tasks through a real Client "
           f"(scheduler process, {result['workers']} worker processes)",
           f"{'':38} {'stock':>12} {'slim':>12} {'stock/slim':>11}"]
    for label, k, spec in rows:
        r = result["ratios"][k]
        out.append(f"{label:38} {fmt(result['stock'].get(k), spec):>12} "
                   f"{fmt(result['slim'].get(k), spec):>12} {'-' if r is None else f'{r:.2f}x':>11}")
    from slimgraph.bench.runner import block_phase

    out.append(f"longest block, most of it in: stock {block_phase(result['stock'])}, "
               f"slim {block_phase(result['slim'])}")
    out.append(f"slim ingestion: {result['slim'].get('ingestion') or '-'}"
               + ("; inputs persisted beforehand, computed inside a span" if result.get("real_use") else ""))
    mode = result.get("dashboard_pages")
    if mode:
        out.append("dask's dashboard: " + (
            "/graph and /status open in a headless Chromium (their periodic updates over websockets)"
            if mode == "browser" else "/graph loaded once, /status built again every 5 s"))
    lp = [result[k].get("longest_ping") for k in ("stock", "slim")]
    if all(lp):
        out.append("longest ping, of it: " + "; ".join(
            f"{k} {p['seconds'] * 1e3:,.0f} ms at {p['at_seconds']:.1f} s: the scheduler's loop blocked "
            f"{p['loop_blocked_seconds'] * 1e3:,.0f} ms, the pinger waited for a CPU "
            f"{p['pinger_cpu_wait_seconds'] * 1e3:,.0f} ms" for k, p in zip(("stock", "slim"), lp)))
    if result.get("background_nice"):
        out.append(f"the workers and the browser at niceness {result['background_nice']} "
                   "(the scheduler, the client and the pinger not niced)")
    tail = result["slim"].get("sent_in_slices")
    if tail:
        out.append(f"slim: {tail['tasks']:,} ready tasks sent after the commit in {tail['slices']:,} slices "
                   f"over {tail['seconds']:.1f} s (longest slice {tail['longest_slice_s'] * 1e3:,.0f} ms; "
                   "the longest block above includes the longest slice)")
    for title, k in (("loop blocks >= 50 ms while update_graph ran", "block_causes"),
                     ("loop blocks >= 50 ms from the submission to the cut", "window_block_causes"),
                     ("loop blocks >= 50 ms of the cancel", "cancel_block_causes")):
        lines = []
        for kind in KINDS:
            causes = result[kind].get(k)
            if causes:
                lines.append(f"  {kind}: " + "; ".join(
                    f"{cause} {c['seconds']:.2f} s"
                    + (f" (x{c['count']})" if c.get("count", 1) > 1 else "")
                    + f" [{c['label']}]"
                    for cause, c in sorted(causes.items(), key=lambda kv: -kv[1]["seconds"])))
        if lines:
            out.append(f"{title}, the longest per cause:")
            out.extend(lines)
    out.append("")
    out.append(f"{'what other users saw (ms)':38} {'stock':>20} {'slim':>20}")
    out.append(f"{'':38} {'median / p99 / max':>20} {'median / p99 / max':>20}")
    for label, k in (("ping round trip", "ping_seconds"),
                     ("2nd client submit -> result", "second_client_submit_seconds"),
                     ("dashboard page load" + (" (2, kept open)" if result.get("dashboard_pages") == "browser"
                                               else ""), "dashboard_page_seconds"),
                     ("worker heartbeat gap", "heartbeat_gap_seconds")):
        cells = []
        for kind in ("stock", "slim"):
            d = result[kind].get(k)
            cells.append("-" if not d else f"{d['median'] * 1e3:,.0f} / {d['p99'] * 1e3:,.0f} / {d['max'] * 1e3:,.0f}")
        out.append(f"{label:38} {cells[0]:>20} {cells[1]:>20}")
    ttl = result["slim"].get("worker_ttl_seconds")
    if ttl:
        out.append(f"(worker-ttl {ttl:g} s; dashboard page errors: stock "
                   f"{result['stock'].get('dashboard_page_errors', 0)}, slim {result['slim'].get('dashboard_page_errors', 0)})")
    if result.get("compute_cut_after_seconds") is not None:
        out.append(f"computation cancelled {result['compute_cut_after_seconds']:g} s after the submission")
        for kind in KINDS:
            states = result[kind].get("cancel_task_states")
            if states:
                out.append(f"  {kind} released " + ", ".join(f"{n:,} {st}" for st, n in states.items()))
    else:
        out.append(f"same result: {result['same_result']}")
    return "\n".join(out)
