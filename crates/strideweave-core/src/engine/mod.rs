//! Transfer engine: worker threads and one-shot completion cells.
