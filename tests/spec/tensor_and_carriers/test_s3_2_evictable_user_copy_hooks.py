"""docs/spec/tensor-and-carriers.md §3.2 Evictable(primary, secondary), with
a `_copy` hook written the way users write it (issue 11, item 2): it writes through `output`
during evict and promote, while an owned tier still refuses writes from outside the
transition."""
import pytest

import strideweave as sw
from strideweave import Evictable, Generic, Layout, Shape, Stride, Tensor

from user_written_hooks import OutputWritingMove


def flat(n):
    return Layout(Shape([n]), Stride([1]))


def test_a_copy_hook_writes_through_output_during_evict_and_promote():
    with sw.registered_move_operation(Generic, Generic, OutputWritingMove):
        plain = sw.move(Tensor(Generic([1.0, 2.0]), 0, flat(2)), Generic([0.0, 0.0]))
        assert plain.tolist() == [1.0, 2.0]
        e = Evictable(Generic([1.0, 2.0]), Generic([]))
        e.evict()
        assert e.is_evicted()
        e.promote()
        assert not e.is_evicted() and [e[0], e[1]] == [1.0, 2.0] and e.version == 0
        e[0] = 5.0  # public writes still count, and are refused on the tiers directly
        assert e.version == 1


def test_an_evictable_tier_still_refuses_writes_from_outside_the_transition():
    primary = Generic([1.0, 2.0])
    e = Evictable(primary, Generic([]))
    with pytest.raises(RuntimeError, match="owned by Evictable"):
        primary[0] = 3.0
    assert e[0] == 1.0
