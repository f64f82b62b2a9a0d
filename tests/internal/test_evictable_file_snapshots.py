"""Which promotes map the file (`evictable._TierWork.fresh`, `HostStorage.snapshot_of`): a
`retain_clean` promote, blocking or asynchronous, of at least `SNAPSHOT_MIN_BYTES` from an exact
FileBacked into a fresh exact CPU. Everything else copies or moves, as before. The public
behaviour of the snapshots is tested in
tests/spec/tensor_and_carriers/test_s3_2_evictable_snapshots.py; this checks that those tests do
exercise the mapping."""
import numpy as np
import pytest

import strideweave as sw
from page_cache import drop_page_cache
from strideweave.carriers.evictable import SNAPSHOT_MIN_BYTES

F32 = sw.DType.Float32
BIG = SNAPSHOT_MIN_BYTES // 4


class MyCPU(sw.CPU):
    pass


class MyFile(sw.FileBacked):
    pass


def promoted(n, *, retain_clean=True, primary=sw.CPU, secondary=sw.FileBacked, asynchronous=False,
             uncached=False):
    first = primary(n, dtype=F32)
    np.from_dlpack(sw.Tensor(first, 0, sw.Layout.canonical(sw.Shape(n))))[:] = 7.0
    ev = sw.Evictable(first, secondary(dtype=F32), retain_clean=retain_clean)
    ev.evict()
    if uncached:
        drop_page_cache(ev.secondary.path)
    if asynchronous:
        ev.promote_async().wait(60)
    else:
        ev.promote()
    return ev


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_large_clean_promote_from_a_file_into_a_fresh_cpu_maps_the_file(asynchronous):
    ev = promoted(BIG, asynchronous=asynchronous)
    assert ev.primary._storage.is_file_snapshot()
    assert ev[BIG - 1] == 7.0
    ev.release()


@pytest.mark.parametrize("case", [
    dict(n=BIG - 1),  # below the threshold: copied
    dict(n=BIG, retain_clean=False),  # the specified move
    dict(n=BIG, primary=MyCPU),  # a subclass may override hooks: copied through them
    dict(n=BIG, secondary=MyFile),
    dict(n=BIG - 1, asynchronous=True),
    dict(n=BIG, uncached=True),  # a copy reads the file in pieces, faster than a snapshot's one read
    dict(n=BIG, uncached=True, asynchronous=True),
])
def test_other_promotes_copy_or_move(case):
    ev = promoted(**case)
    storage = ev.primary._sw_storage()
    assert storage is None or not storage.is_file_snapshot()
    assert ev[case["n"] - 1] == 7.0
    ev.release()
