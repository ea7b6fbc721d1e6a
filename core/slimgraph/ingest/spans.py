"""Spans: the span each submitted task belongs to, decided once per group.

Stock's ``SpansSchedulerExtension.observe_tasks`` walks every touched task:
a task joins its group's span; a group without one takes the span named by
its first task's ``span`` annotation, or the default span; then every task
gets its span's annotation (or loses a stale one). On the way it gives
every task an empty ``annotations`` dict (64 B each).

The outcome depends on each group's first touched task only, except for
the per-task annotation writes. And a span's annotation is known before the
span exists: the span ``_ensure_span(name, ids)`` makes is named ``name``
with id chain ``ids``, so its annotation is ``{"name": name, "ids": ids}``
(a span that exists already is read). So :func:`plan`, part of the build
(off the event loop), lists the groups in order of their first touched task,
predicts each group's annotation and writes it into the build's own new
tasks; :func:`observe`, when applying, makes the per-group decision for
real (creating spans, attaching groups), checks each prediction, and only
writes into tasks the scheduler already had. A staged graph inside
``with span(...)`` costs the event loop one step per group, not per task.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from slimgraph import shim
from slimgraph.model.taskstate import stored_annotations

#: A group whose span the build could not predict (its span is decided, and
#: its tasks written, when applying).
UNKNOWN = object()


@dataclass
class SpanGroup:
    group: Any
    #: the group's first touched task (its annotation names a group's span
    #: when the group has none yet)
    first: Any
    #: the group's span id as the build read it
    span_id_read: Any = None
    #: the annotation the build expects the group's span to have (None: no
    #: annotation, e.g. the default span), or UNKNOWN
    predicted: Any = UNKNOWN
    #: tasks whose annotations are written when applying (tasks the
    #: scheduler already had; all listed tasks when not predicted)
    tasks: list = field(default_factory=list)


def plan(b: Any, spans_ext: Any, with_span_annotations: bool, plugin_out: dict | None) -> list[SpanGroup]:
    """The groups of build ``b``'s touched tasks, in order of first
    appearance, their predicted annotations written into the new tasks.
    ``plugin_out``: if a dict, filled with ``{key: annotation}`` of the new
    tasks that get one (what plugins get as ``annotations["span"]``)."""
    is_new = b.is_new
    if not with_span_annotations and not b.existing and not b.live_groups:
        # a fresh graph without span annotations: every group is new, takes
        # the default span (no annotation), and no task carries a stale one
        return [SpanGroup(tg, first, None, None) for tg, first in b.group_firsts]
    out: list[SpanGroup] = []
    by_group: dict = {}
    for ts in b.touched:
        tg = ts.group
        sg = by_group.get(id(tg))
        if sg is None:
            by_group[id(tg)] = sg = SpanGroup(tg, ts, tg.span_id)
            sg.predicted = _predict(spans_ext, tg, ts)
            out.append(sg)
        new = is_new(ts)
        ann = sg.predicted
        if not new or ann is UNKNOWN:
            sg.tasks.append(ts)
            continue
        own = stored_annotations(ts)
        if ann:
            if own is None:
                ts.annotations = own = {}
            own["span"] = ann
            if plugin_out is not None:
                plugin_out[ts.key] = ann
        elif own:
            own.pop("span", None)
    return out


def _predict(spans_ext: Any, tg: Any, first: Any) -> Any:
    if tg.span_id:
        span = spans_ext.spans.get(tg.span_id)
        return UNKNOWN if span is None else span.annotation
    own = stored_annotations(first)
    ann = own.get("span") if own else None
    if not ann:
        return None  # the default span: no annotation
    span = spans_ext.spans.get(ann["ids"][-1])
    if span is not None:
        return span.annotation
    return {"name": ann["name"], "ids": tuple(ann["ids"])}


def observe(spans_ext: Any, groups: list[SpanGroup], span_metadata: Any, code: tuple, out: dict,
            touched: list) -> None:
    """Attach the groups to spans as stock's ``observe_tasks`` does and write
    the annotations the build did not; ``out`` gets ``{key: annotation}`` of
    those tasks. (Each group's span id is as the build read it: the staged
    commit checks that first.)"""
    default = None
    metadata_added: set = set()
    code_added: set = set()
    for sg in groups:
        tg = sg.group
        if tg.span_id:
            span = spans_ext.spans[tg.span_id]
        else:
            own = stored_annotations(sg.first)
            ann = own.get("span") if own else None
            if ann:
                span = shim.ensure_span(spans_ext, ann["name"], ann["ids"])
            else:
                if default is None:
                    default = shim.default_span(spans_ext)
                span = default
            tg.span_id = span.id
            span.groups.add(tg)
        if code and span not in code_added:
            code_added.add(span)
            shim.add_span_code(span, code)
        if span_metadata and span not in metadata_added:
            metadata_added.add(span)
            span.add_metadata(span_metadata)
        ann = span.annotation
        tasks = sg.tasks
        if sg.predicted is not UNKNOWN and ann != sg.predicted:  # pragma: no cover
            # (_predict follows _ensure_span; should a release change that,
            # stay correct: write every task of the group)
            tasks = [ts for ts in touched if ts.group is tg]
        for ts in tasks:
            own = stored_annotations(ts)
            if ann:
                if own is None:
                    ts.annotations = own = {}
                own["span"] = out[ts.key] = ann
            elif own:
                own.pop("span", None)
