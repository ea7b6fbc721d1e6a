"""Spans: the span each submitted task belongs to, decided once per group.

Stock's ``SpansSchedulerExtension.observe_tasks`` walks every touched task:
a task joins its group's span; a group without one takes the span named by
its first task's ``span`` annotation, or the default span; then every task
gets its span's annotation (or loses a stale one). On the way it gives
every task an empty ``annotations`` dict (64 B each).

The outcome only depends on each group's first touched task, except for
the annotation write, which only happens for tasks of a span that has an
annotation (or tasks carrying a stale one). So :func:`plan` (part of the
build, off the event loop) lists the groups in order of their first
touched task, with only the tasks that may need a write, and
:func:`observe` (when applying, on the loop) does the per-group decision
and the writes: a fresh graph without span annotations costs one step per
group, not per task.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from slimgraph import shim
from slimgraph.model.taskstate import stored_annotations


@dataclass
class SpanGroup:
    group: Any
    #: the group's first touched task (its annotation names a new group's span)
    first: Any
    #: made by this submission and without a span yet (its span has no
    #: annotation unless a task's own names one)
    new: bool = False
    #: the touched tasks whose annotations may be written
    tasks: list = field(default_factory=list)


def plan(b: Any, with_span_annotations: bool) -> list[SpanGroup]:
    """The groups of build ``b``'s touched tasks, in order of first
    appearance, each with the tasks whose annotations may be written.

    Every task of a group the scheduler already had (its span may carry an
    annotation) is listed, and every task when the submission has span
    annotations; otherwise only tasks that already carry annotations. A
    fresh graph without span annotations needs no pass over its tasks: the
    build noted each group's first task.
    """
    if not with_span_annotations and not b.existing and not b.live_groups:
        return [SpanGroup(tg, first, True) for tg, first in b.group_firsts]
    out: list[SpanGroup] = []
    by_group: dict = {}
    new_tasks = b.tasks
    for ts in b.touched:
        tg = ts.group
        sg = by_group.get(id(tg))
        if sg is None:
            by_group[id(tg)] = sg = SpanGroup(tg, ts, tg.span_id is None and new_tasks.get(ts.key) is ts)
            out.append(sg)
        if with_span_annotations or not sg.new or stored_annotations(ts):
            sg.tasks.append(ts)
    return out


def observe(spans_ext: Any, groups: list[SpanGroup], span_metadata: Any, code: tuple) -> dict:
    """Attach the groups to spans as stock's ``observe_tasks`` does; returns
    ``{key: span annotation}`` for the tasks that got one (what stock hands
    plugins as ``annotations["span"]``)."""
    out: dict = {}
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
        for ts in sg.tasks:
            own = stored_annotations(ts)
            if ann:
                if own is None:
                    ts.annotations = own = {}
                own["span"] = out[ts.key] = ann
            elif own:
                own.pop("span", None)
    return out
