"""layout-and-dtype.md §9 against CUTLASS's reference implementation (pycute, from the
pinned ``nvidia-cutlass`` test dependency): on random hierarchical layouts, wherever pycute
returns a layout, ours has the same size and the same index at every ordinal (and, for
divides and products, the same top-level modes). Where pycute asserts, or returns a layout
that breaks the operation's own law (CuTe's C++ states the precondition pycute does not
check), ours raises ValueError naming the condition or returns a layout that keeps the law.
"""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cute_strategies import from_pycute, image, layouts, to_pycute, top_modes, tractable_layouts
from strideweave import Layout

pycute = pytest.importorskip("pycute")

RUNS = settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PRECONDITION_WORDS = ("divisibility", "injective", "tiler has", "profile has")


def _pycute(fn, *args):
    """pycute's result, or None where it asserts (or fails on a degenerate result)."""
    try:
        return fn(*args)
    except (AssertionError, ZeroDivisionError, IndexError, TypeError):
        return None


def _ours(fn, *args):
    try:
        return fn(*args)
    except ValueError as e:
        assert any(w in str(e) for w in PRECONDITION_WORDS), str(e)
        return e


def _same_function(ours, theirs):
    assert ours.size == theirs.size()
    assert image(ours) == image(theirs), (ours, theirs)


def _same_top_modes(ours, theirs):
    a, b = top_modes(ours), top_modes(theirs)
    assert len(a) == len(b), (ours, theirs)
    for x, y in zip(a, b):
        _same_function(x, y)


def _composes(result, a, b):
    """The composition law: result(i) == a(b(i)) wherever b(i) is in a's domain."""
    if result.size() != b.size():
        return False
    return all(result(i) == a(b(i)) for i in range(b.size()) if b(i) < a.size())


def _is_complement(c, a, cotarget):
    """c fills [0, cotarget) with a's image: (a without its stride-0 modes, c) injective and covering."""
    if c is None or any(s == 0 for s in pycute.flatten(c.shape)):
        return False
    a = pycute.filter(a)
    idx = [a(i) + c(j) for i in range(a.size()) for j in range(c.size())]
    return len(set(idx)) == len(idx) and set(range(cotarget)) <= set(idx)


@RUNS
@given(layouts())
def test_coalesce_matches_pycute(a):
    theirs = pycute.coalesce(to_pycute(a))
    ours = Layout.coalesce(a)
    _same_function(ours, theirs)
    assert ours == from_pycute(theirs)


@RUNS
@given(layouts())
def test_filter_matches_pycute(a):
    theirs = pycute.filter(to_pycute(a))
    ours = a.filter()
    assert ours == from_pycute(theirs)


@RUNS
@given(layouts(), st.one_of(tractable_layouts(), layouts()))
def test_compose_matches_pycute(a, b):
    pa, pb = to_pycute(a), to_pycute(b)
    theirs = _pycute(pycute.composition, pa, pb)
    ours = _ours(Layout.compose, a, b)
    if isinstance(ours, ValueError):
        assert theirs is None or not _composes(theirs, pa, pb), (a, b, theirs, ours)
    elif theirs is not None:
        _same_function(ours, theirs)
    else:
        assert _composes(to_pycute(ours), pa, pb)


@RUNS
@given(st.one_of(tractable_layouts(), layouts()), st.integers(1, 300))
def test_complement_matches_pycute(a, cotarget):
    pa = to_pycute(a)
    theirs = _pycute(pycute.complement, pa, cotarget)
    ours = _ours(Layout.complement, a, cotarget)
    if isinstance(ours, ValueError):
        assert not _is_complement(theirs, pa, cotarget), (a, theirs, ours)
    else:
        assert theirs is not None
        _same_function(ours, theirs)
        assert _is_complement(to_pycute(ours), pa, cotarget)


def _divide_law(result, a, b):
    """pycute's divide is right iff it is a ∘ (b, complement(b, size a)) with a true complement."""
    comp = _pycute(pycute.complement, b, a.size())
    if result is None or comp is None or not _is_complement(comp, b, a.size()):
        return False
    return _composes(result, a, pycute.make_layout(b, comp))


@RUNS
@given(tractable_layouts(), tractable_layouts())
def test_divide_matches_pycute(a, b):
    pa, pb = to_pycute(a), to_pycute(b)
    theirs = _pycute(pycute.logical_divide, pa, pb)
    ours = _ours(Layout.divide, a, b)
    if isinstance(ours, ValueError):
        assert not _divide_law(theirs, pa, pb), (a, b, theirs, ours)
    else:
        assert theirs is not None
        _same_top_modes(ours, theirs)


@RUNS
@given(tractable_layouts(), st.data())
def test_zipped_and_tiled_divide_match_pycute(a, data):
    rank = len(a)
    tiler = tuple(data.draw(st.one_of(st.none(), tractable_layouts())) for _ in range(data.draw(st.integers(1, rank))))
    pa, pt = to_pycute(a), tuple(None if t is None else to_pycute(t) for t in tiler)
    for op, ref in ((Layout.zipped_divide, pycute.zipped_divide), (Layout.tiled_divide, pycute.tiled_divide)):
        theirs = _pycute(ref, pa, pt)
        ours = _ours(op, a, tiler)
        if isinstance(ours, ValueError):
            continue  # a mode's divide broke a precondition: checked mode by mode above
        assert theirs is not None
        _same_top_modes(ours, theirs)
        for x, y in zip(top_modes(ours), top_modes(theirs)):
            _same_top_modes(x, y)


@RUNS
@given(tractable_layouts(), tractable_layouts())
def test_product_matches_pycute(a, b):
    pa, pb = to_pycute(a), to_pycute(b)
    theirs = _pycute(pycute.logical_product, pa, pb)
    ours = _ours(Layout.product, a, b)
    if isinstance(ours, ValueError):
        comp = _pycute(pycute.complement, pa, pa.size() * pb.cosize())
        bad = comp is None or not _is_complement(comp, pa, pa.size() * pb.cosize())
        assert bad or theirs is None or not _composes(theirs[1], comp, pb), (a, b, theirs, ours)
    else:
        assert theirs is not None
        _same_top_modes(ours, theirs)


@RUNS
@given(layouts())
def test_right_inverse_matches_pycute(a):
    theirs = pycute.right_inverse(to_pycute(a))
    ours = a.right_inverse()
    _same_function(ours, theirs)
    assert [a(ours(i)) for i in range(ours.size)] == list(range(ours.size))


@RUNS
@given(st.one_of(tractable_layouts(), layouts()))
def test_left_inverse_matches_pycute(a):
    theirs = _pycute(pycute.left_inverse, to_pycute(a))
    ours = _ours(Layout.left_inverse, a)
    if isinstance(ours, ValueError):
        assert not a.is_injective() or theirs is None or any(theirs(a(i)) != i for i in range(a.size))
    else:
        assert [ours(a(i)) for i in range(a.size)] == list(range(a.size))
        if theirs is not None and all(theirs(a(i)) == i for i in range(a.size)):
            _same_function(ours, theirs)


def _nested_tiler(data, a, depth=0):
    """A tuple tiler that follows ``a``'s modes: each entry None, a layout, or (for a nested
    mode, up to depth 2) a tuple tiler of that mode's own modes."""
    entries = []
    for i in range(data.draw(st.integers(1, len(a)))):
        mode = a[i]
        kinds = ["none", "layout"] + (["tuple"] * 2 if not mode.is_leaf and depth < 2 else [])
        kind = data.draw(st.sampled_from(kinds))
        if kind == "none":
            entries.append(None)
        elif kind == "layout":
            entries.append(data.draw(tractable_layouts()))
        else:
            entries.append(_nested_tiler(data, mode, depth + 1))
    return tuple(entries)


def _to_pycute_tiler(t):
    if t is None:
        return None
    if isinstance(t, tuple):
        return tuple(_to_pycute_tiler(x) for x in t)
    return to_pycute(t)


def _same_tree_of_functions(ours, theirs, depth):
    """Same top-level modes, and (to ``depth`` levels) the same modes inside each."""
    _same_top_modes(ours, theirs)
    if depth:
        for x, y in zip(top_modes(ours), top_modes(theirs)):
            _same_tree_of_functions(x, y, depth - 1)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(tractable_layouts().filter(lambda a: any(not m.is_leaf for m in a)), st.data())
def test_nested_tuple_tilers_match_pycute(a, data):
    """A tiler nested as deep as the layout's modes divides, zips and composes each sub-mode
    as pycute does."""
    tiler = _nested_tiler(data, a)
    pa, pt = to_pycute(a), _to_pycute_tiler(tiler)
    for op, ref, depth in (
        (Layout.divide, pycute.logical_divide, 2),
        (Layout.zipped_divide, pycute.zipped_divide, 2),
        (Layout.tiled_divide, pycute.tiled_divide, 1),
    ):
        ours = _ours(op, a, tiler)
        theirs = _pycute(ref, pa, pt)
        if isinstance(ours, ValueError):
            continue  # a sub-mode's divide broke a precondition (checked one mode at a time above)
        assert theirs is not None, (op.__name__, a, tiler, ours)
        _same_tree_of_functions(ours, theirs, depth)
