//! The default sampler (OpenAI semantics) as a Wasm component.
//! The logic lives in `minisgl-policies`, which the host also links natively.

minisgl_plugin_sdk::export_sampler!(minisgl_policies::DefaultSampler);
