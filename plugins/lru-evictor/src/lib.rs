//! The default evictor (radix-leaf LRU) as a Wasm component.
//! The logic lives in `minisgl-policies`, which the host also links natively.

minisgl_plugin_sdk::export_evictor!(minisgl_policies::Lru);
