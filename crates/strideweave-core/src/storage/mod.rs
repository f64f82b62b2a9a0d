//! Storage backends: host buffers, files, block devices.
