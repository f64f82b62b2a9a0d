"""A MoveOperation whose `_copy` writes through `output`, the way users write
one (issue 11, item 2), shared by the Evictable and storage-side-of-move tests."""
import strideweave as sw


class OutputWritingMove(sw.MoveOperation):
    def _copy(self, tensor, destination, output, element_count):
        for i in range(tensor.layout.size):
            output[i] = tensor[i]
