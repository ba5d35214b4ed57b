//! Shared helpers for the criterion benches.
