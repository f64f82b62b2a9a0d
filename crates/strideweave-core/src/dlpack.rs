//! DLPack managed-tensor construction.
