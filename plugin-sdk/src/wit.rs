//! wit-bindgen output for the three worlds of `wit/` (Wasm targets only).
//!
//! Each world gets its own module; the evictor and sampler worlds reuse the
//! scheduler world's `types` module (`with:`), so one set of conversions in
//! [`crate::convert`] serves all three. The export macros are public
//! (`pub_export_macro`) so that a plugin crate, not this library, decides
//! which single world its component exports.

/// Bindings of the `scheduler` world; owns the shared `types` module.
#[allow(clippy::all)]
pub mod scheduler {
    wit_bindgen::generate!({
        world: "scheduler",
        path: "../wit",
        runtime_path: "::minisgl_plugin_sdk::__private::wit_bindgen::rt",
        pub_export_macro: true,
        export_macro_name: "export_world",
        generate_unused_types: true,
    });
}

/// Bindings of the `evictor` world.
#[allow(clippy::all)]
pub mod evictor {
    wit_bindgen::generate!({
        world: "evictor",
        path: "../wit",
        runtime_path: "::minisgl_plugin_sdk::__private::wit_bindgen::rt",
        pub_export_macro: true,
        export_macro_name: "export_world",
        with: { "minisgl:plugin/types@0.1.0": crate::wit::scheduler::minisgl::plugin::types },
    });
}

/// Bindings of the `sampler` world.
#[allow(clippy::all)]
pub mod sampler {
    wit_bindgen::generate!({
        world: "sampler",
        path: "../wit",
        runtime_path: "::minisgl_plugin_sdk::__private::wit_bindgen::rt",
        pub_export_macro: true,
        export_macro_name: "export_world",
        with: { "minisgl:plugin/types@0.1.0": crate::wit::scheduler::minisgl::plugin::types },
    });
}

/// The WIT records, shared by the three worlds.
pub use scheduler::minisgl::plugin::types;
