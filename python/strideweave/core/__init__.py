"""strideweave.core: internal representation namespaces."""
