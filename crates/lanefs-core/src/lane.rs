//! Lanes: the per-thread index that spreads per-CPU-style state. Defined in
//! the store crate (the lowest layer, whose inode allocator is per lane too)
//! and re-exported here, so every layer agrees on a thread's lane.

pub use lanefs_store::lane;
