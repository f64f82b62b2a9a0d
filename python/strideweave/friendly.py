"""strideweave.friendly: convenience entry points."""
__all__ = ["sum"]


def sum(tensor):  # noqa: A001 - the specification names it `sum`
    raise NotImplementedError("sum arrives with the autograd issue")
