//! lanefs: an embeddable many-core file system.
pub use lanefs_core::*;
