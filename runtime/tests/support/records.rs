//! Records the store tests write: the library's own
//! (`leasehold::testing::records`), the same the conformance suite writes.

#![allow(unused_imports, reason = "each test binary uses part of the helper")]

pub use leasehold::testing::records::*;
