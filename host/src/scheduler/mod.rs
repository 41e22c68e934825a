//! The scheduler loop: the request lifecycle, step by step.
