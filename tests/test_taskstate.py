"""SlimTaskState's stock-facing surface: annotations without a dict per task."""
from __future__ import annotations

import pytest
from distributed.scheduler import TaskState

from slimgraph.model.taskstate import (
    EXEC_DEFAULTS,
    EXTRA_DEFAULTS,
    NO_EXTRA,
    NoAnnotations,
    SlimTaskState,
    has_extra,
    stored_annotations,
)


class _Group:
    def add(self, ts):
        pass


def _task(key="x"):
    return SlimTaskState(key, None, "released", _Group())


def test_a_task_without_annotations_reads_as_an_empty_dict_and_stores_none():
    ts = _task()
    ann = ts.annotations
    assert ann == {} and not ann and "span" not in ann and ann.get("span") is None
    assert isinstance(ann, dict) and ann is not None
    assert stored_annotations(ts) is None and not has_extra(ts)
    ts.annotations = ts.annotations  # a read handed back stores nothing
    assert stored_annotations(ts) is None and not has_extra(ts)


def test_writing_through_the_read_stores_the_dict_on_the_task():
    ts = _task()
    ann = ts.annotations
    ann["span"] = {"name": ("a",)}
    ann["retries"] = 2  # the same reference keeps working
    assert ts.annotations == {"span": {"name": ("a",)}, "retries": 2}
    assert stored_annotations(ts) is ann
    assert ts.annotations.pop("span") == {"name": ("a",)}
    assert ts.annotations == {"retries": 2}


def test_update_and_setdefault_adopt_too():
    a, b = _task("a"), _task("b")
    a.annotations.update(priority=3)
    assert a.annotations == {"priority": 3}
    assert b.annotations.setdefault("x", 1) == 1 and b.annotations == {"x": 1}
    assert type(stored_annotations(_task())) is not NoAnnotations


def test_assigning_a_dict_and_none():
    ts = _task()
    ts.annotations = {"workers": ["w"]}
    assert ts.annotations == {"workers": ["w"]}
    ts.annotations = None
    assert ts.annotations == {} and stored_annotations(ts) is None


def test_slim_tasks_pass_for_task_states():
    ts = _task()
    assert isinstance(ts, TaskState) and isinstance(ts, SlimTaskState)
    assert type(ts) is SlimTaskState


def test_extra_starts_with_every_default():
    """Extra's and Rare's written-out constructors set every slot to its
    default, of the default's type (``nbytes`` -1, ``suspicious`` 0,
    ``_queueable`` True); a new Extra shares the default Rare."""
    from slimgraph.model.taskstate import EXEC_DEFAULTS, NO_RARE, RARE_DEFAULTS, Extra, Rare, _written_out_init

    for cls, defaults in ((Extra, EXEC_DEFAULTS), (Rare, RARE_DEFAULTS)):
        x = cls()
        for name, default in defaults.items():
            value = getattr(x, name)
            assert value == default and type(value) is type(default), name
    assert Extra().more is NO_RARE
    assert set(EXEC_DEFAULTS) | set(RARE_DEFAULTS) == set(EXTRA_DEFAULTS)
    with pytest.raises(TypeError, match="cannot be written out"):
        _written_out_init({"a": object()})


def test_the_shared_default_extra_is_never_written():
    """Reads go through one shared Extra until a task sets something: every
    set must give that task its own first, whatever the attribute."""
    a, b = _task("a"), _task("b")
    for i, name in enumerate(EXTRA_DEFAULTS):
        value = ("set", i)
        setattr(a, name, value)
        assert getattr(a, name) == value
    assert has_extra(a) and not has_extra(b)
    for name, default in EXTRA_DEFAULTS.items():
        assert getattr(NO_EXTRA if name in EXEC_DEFAULTS else NO_EXTRA.more, name) == default, name
        if name != "annotations":  # (reads as an empty dict)
            assert getattr(b, name) == default, name
    for shared, name in ((NO_EXTRA, "run_id"), (NO_EXTRA.more, "actor")):
        with pytest.raises(AttributeError, match="read-only"):
            setattr(shared, name, 1)
    d = _task("d")
    d.run_id = 7  # an execution attribute: an Extra, still the shared Rare
    assert has_extra(d) and d._x.more is NO_EXTRA.more and d.actor is False
    d.actor = True
    assert d._x.more is not NO_EXTRA.more and d.actor is True and d.run_id == 7
    assert b.actor is False and NO_EXTRA.more.actor is False
    c = _task("c")
    c.actor = False  # a default: no Extra of its own
    c.nbytes = -1
    assert not has_extra(c)
