"""Names are resolved once per name and submission, through no global cache."""
from __future__ import annotations

import asyncio

from dask import delayed
from dask.utils import key_split as cached_key_split

from differential import Pair
from distributed.utils import key_split_group
from hypothesis import given
from hypothesis import strategies as st

from slimgraph.model.keys import NameResolver, group_name, key_split


def inc(x):
    return x + 1


NAMES = [
    "inc-5d4c3b2a1f0e9d8c7b6a5f4e3d2c1b0a", ("x-1", 0, 2), "('y', 3)", "data-ab12", b"z-1",
    "ae05086432ca935f6eba409a8ecd4896", "<module.sub.myclass object at 0xdaf372", "x", "x-1",
    "finalize-hlgfinalizecompute-b7f3f5ac36ee4995be805d3ab9ae130c", 7, 1.5, ("a",), "A" * 32,
    "(x-2, 1)", "getitem-ae05086432ca935f6eba409a8ecd4896", b"<x.y z>",
]


def test_key_split_and_group_name_are_distributeds_without_the_cache():
    for k in NAMES:
        assert key_split(k) == cached_key_split(k), k
        assert group_name(k) == key_split_group(k), k
    assert not hasattr(key_split, "cache_info")


@given(st.one_of(st.text(min_size=1), st.binary(min_size=1).filter(lambda b: b.isascii()),
                 st.tuples(st.text(min_size=1), st.integers())))
def test_group_name_matches_key_split_group(key):
    # (some keys break distributed's own function, e.g. "<": then ours breaks
    # the same way, as stock's update_graph would)
    assert _outcome(group_name, key) == _outcome(key_split_group, key)
    assert _outcome(key_split, key) == _outcome(cached_key_split, key)


def _outcome(fn, key):
    try:
        return fn(key)
    except Exception as e:  # noqa: BLE001 - compared, not hidden
        return type(e)


def test_resolver_makes_one_group_per_name():
    made = []

    def make(group: str, prefix: str):
        made.append((group, prefix))
        return (group, prefix)

    r = NameResolver(make)
    for i in range(50):
        assert r.group_of(("x-1", i)) == ("x-1", "x")
    assert r.group_of("inc-5d4c3b2a1f0e9d8c7b6a5f4e3d2c1b0a") == ("inc", "inc")
    assert made == [("x-1", "x"), ("inc", "inc")]


_KEY_WORDS = st.text(alphabet="abf09_(<,.", min_size=0, max_size=9)


@given(st.lists(st.one_of(
    st.lists(_KEY_WORDS, min_size=1, max_size=5).map("-".join),
    st.tuples(st.sampled_from(["inc", "add", "a-b", "x-1", "getitem"]), st.text(alphabet="0123456789abcdef", min_size=1, max_size=32))
      .map("-".join),
), min_size=1, max_size=40))  # fmt: skip
def test_resolver_names_str_keys_as_distributed_does(keys):
    """Keys of one stem share a group (the delayed graph's fast way): every
    key still gets distributed's group name and prefix, the same ones however
    the keys before it went."""
    r = NameResolver(lambda group, prefix: (group, prefix))
    for k in keys:
        want = (_outcome(key_split_group, k), _outcome(cached_key_split, k))
        if isinstance(want[0], type):  # distributed's own fails: so does ours
            assert _outcome(r.group_of, k) == want[0], k
        else:
            assert r.group_of(k) == want, k


def test_ingestion_leaves_dasks_key_split_cache_alone():
    """Stock resolves every key through dask's 100k-entry lru_cache; the slim
    engine must not fill it (or keep keys alive in it)."""
    n = 600

    async def body():
        async with Pair(n_workers=0) as p:
            msgs, _ = p.capture(lambda c: c.compute(
                [delayed(inc)(i, dask_key_name=f"leaf{i}-{i:032x}") for i in range(n)]))
            grown = {}
            for tag, s, c in (("slim", p.slim, p.c_slim), ("stock", p.stock, p.c_stock)):
                cached_key_split.cache_clear()
                for msg in msgs:
                    await s.update_graph(client=c.id, **p.payload(msg))
                grown[tag] = cached_key_split.cache_info().currsize
                assert len(s.tasks) >= n
            return grown

    grown = asyncio.run(body())
    assert grown["stock"] >= 600  # what stock does, so the check can fail
    assert grown["slim"] < 10
