//! Compute kernels over hierarchical layouts.
