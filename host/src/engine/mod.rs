//! The engine: offline API and the model runner with overlap.
