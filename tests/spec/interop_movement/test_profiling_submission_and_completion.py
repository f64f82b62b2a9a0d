"""docs/spec/interop-movement.md, "Requirement: Profiling distinguishes submission from completion".
(The event pairs' fields are autograd-and-profiling.md §9's, tested in
tests/spec/autograd_and_profiling/test_s9_operation_profiling.py.)"""
import time

import strideweave as sw
from strideweave import CPU
from strideweave.carriers.extension import TransferProvider

from gated_moves import PREPARED, GateCompletion, Gated, gated_tensor


def test_profile_distinguishes_submission_from_completion():
    completion = GateCompletion()
    PREPARED.append(completion)
    t = gated_tensor([1.0, 2.0])
    with sw.profile() as prof:
        with sw.no_grad():
            handle = sw.move_async(t, CPU(2))
        time.sleep(0.05)
        completion.gate.set()
        handle.wait()
        handle.wait()
        assert handle.done
    events = prof.events()
    assert [e.phase for e in events] == ["move_submit", "move_complete"]
    submit, complete = events
    assert submit.name == complete.name == "move"
    assert submit.carrier_type is Gated and submit.destination_type is CPU
    assert submit.correlation_id == submit.id and complete.correlation_id == submit.id
    assert complete.start_time_ns == submit.start_time_ns
    assert complete.duration_ns >= submit.duration_ns and complete.duration_ns >= 50_000_000
    assert complete.parent_id is None and complete.succeeded and submit.succeeded
    assert submit.implementation_type is TransferProvider
