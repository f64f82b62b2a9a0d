"""The ownership field of the carrier base (`_sw_owner`) and the owner's own write path
(`_sw_write_as_owner`), set by hand on a user carrier: owned carriers refuse public mutation
but not reads, the owner still writes, and clearing the field restores mutation. Ownership
as users meet it (an Evictable's tiers) is tested in tests/spec/."""
import pytest

from list_carrier import ListCarrier


def test_a_hand_set_owner_blocks_public_mutation_but_not_reads_or_the_owners_writes():
    owner, c = ListCarrier([0.0]), ListCarrier([1.0])
    c._sw_owner = owner
    assert c.is_owned() and not c.is_mutable()
    assert c[0] == 1.0
    with pytest.raises(RuntimeError):
        c[0] = 3.0
    with pytest.raises(RuntimeError):
        c.release()
    with pytest.raises(RuntimeError):
        c._increment_version()
    c._sw_write_as_owner(owner, 0, 4.0)
    assert c[0] == 4.0 and c.version == 1
    c._sw_owner = None
    c._increment_version()
    assert c.version == 2
