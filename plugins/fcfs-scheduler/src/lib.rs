//! The default scheduler (FCFS with chunked prefill) as a Wasm component.
//! The logic lives in `minisgl-policies`, which the host also links natively.

minisgl_plugin_sdk::export_scheduler!(minisgl_policies::Fcfs);
