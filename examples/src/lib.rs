//! Examples of embedding leasehold.
