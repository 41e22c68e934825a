//! Host bindings of the three plugin worlds of `wit/`, and conversions from
//! and to the plain types of `minisgl_plugin_sdk` (`From` both ways, expanded
//! from the SDK's `wit_conversions!`, the same list of fields the guest side
//! uses).
//!
//! This is the only `bindgen!` site of the host: one macro expands it once
//! per world. The scheduler world generates the shared `types` module; the
//! evictor and sampler worlds reuse it through `with:`, so there is one Rust
//! type per WIT record and one set of conversions.

macro_rules! plugin_world {
    ($module:ident, $world:tt, { $($with:tt)* }) => {
        pub mod $module {
            wasmtime::component::bindgen!({
                world: $world,
                path: "../wit",
                with: { $($with)* },
            });
        }
    };
}

plugin_world!(scheduler, "scheduler", {});
plugin_world!(evictor, "evictor", {
    "minisgl:plugin/types": super::scheduler::minisgl::plugin::types,
});
plugin_world!(sampler, "sampler", {
    "minisgl:plugin/types": super::scheduler::minisgl::plugin::types,
});

/// The WIT records, one Rust type each, shared by the three worlds.
pub use scheduler::minisgl::plugin::types as w;

// Plain <-> WIT records, both ways, from the SDK's one list of their fields.
minisgl_plugin_sdk::wit_conversions!(w);
