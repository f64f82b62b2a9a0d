//! Hierarchical (CuTe-style) layouts.
