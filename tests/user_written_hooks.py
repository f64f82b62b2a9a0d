"""A MoveOperation whose `_copy` writes through `output`, the way users write
one (issue 11, item 2), shared by the Evictable and storage-side-of-move tests."""
import strideweave as sw


class OutputWritingMove(sw.MoveOperation):
    def _copy(self, tensor, destination, output, element_count):
        for i in range(tensor.layout.size):
            output[i] = tensor[i]


class NodeWatchingMove(OutputWritingMove):
    """`OutputWritingMove` that notes, for each `_copy`, the operation (the autograd node),
    what it had saved (`inputs()`, filled at forward entry only when the move records) and
    the output Tensor (whose `autograd_ctx` the move sets at completion only when it records):
    a public view of whether a move between tiers made an autograd node."""

    seen: list = []

    def _copy(self, tensor, destination, output, element_count):
        NodeWatchingMove.seen.append((self, self.inputs(), output))
        super()._copy(tensor, destination, output, element_count)
