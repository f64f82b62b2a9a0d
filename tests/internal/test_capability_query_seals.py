"""Sealing by a capability query (docs/spec/extension-and-tiling.md §4): the framework's own
class-level query `carriers.extension.is_definition_backed`, which the move layer and
TiledEvictable ask of carriers they already hold (constructing one sealed its class first), so
no public call reaches sealing by the query alone. Sealing by an instance and by a legacy
registry call is tested publicly in
tests/spec/extension_and_tiling/test_s4_definition_backed_carriers.py."""
from strideweave.carriers import extension as ext

from defined_carriers import sealed_by


def seal_by_capability_query(cls):
    ext.is_definition_backed(cls)


def test_capability_query_seals_the_class_it_asks_about():
    cls = sealed_by(seal_by_capability_query)
    assert ext.definition_of(cls) is None
    cls()  # still a working definition-free class
