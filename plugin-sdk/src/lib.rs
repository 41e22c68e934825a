//! Guest SDK for minisgl policy plugins.
//!
//! A policy implements one of the plain traits below against the plain types in
//! [`types`]; `export_scheduler!`, `export_evictor!` or `export_sampler!` turn
//! it into a Wasm component for the matching world of `wit/`. The same policy
//! type can be linked natively (the host does this for its built-in fallbacks).
//!
//! A complete plugin crate (`crate-type = ["cdylib"]`, built with
//! `cargo build --target wasm32-wasip2`):
//!
//! ```
//! use minisgl_plugin_sdk::{export_evictor, CacheLeaf, Evictor};
//!
//! #[derive(Default)]
//! struct Newest;
//!
//! impl Evictor for Newest {
//!     fn name(&self) -> String { "newest-first".into() }
//!     fn pick_victims(&mut self, leaves: &[CacheLeaf], _pages: u32) -> Vec<u64> {
//!         let mut l = leaves.to_vec();
//!         l.sort_by_key(|l| std::cmp::Reverse(l.created_us));
//!         l.iter().map(|l| l.node).collect()
//!     }
//! }
//!
//! export_evictor!(Newest);
//! ```
//!
//! The policy value is created once per instance with `Default` and kept in a
//! thread-local, so `&mut self` state survives from call to call (the host
//! re-creates the instance, and so the state, after a trap).

extern crate self as minisgl_plugin_sdk;

mod records;
pub mod types;

#[cfg(target_arch = "wasm32")]
mod convert;
#[cfg(target_arch = "wasm32")]
#[doc(hidden)]
pub mod wit;

/// Used by the export macros; not a stable interface.
#[doc(hidden)]
pub mod __private {
    #[cfg(target_arch = "wasm32")]
    pub use crate::convert::all;
    #[cfg(target_arch = "wasm32")]
    pub use wit_bindgen;
}

pub use types::*;

/// Chooses each step's batch. See the `scheduler` world in `wit/worlds.wit`.
pub trait Scheduler {
    /// Short human-readable name.
    fn name(&self) -> String;
    /// One decision per engine step.
    fn schedule(
        &mut self,
        waiting: &[RequestView],
        running: &[RequestView],
        budget: &Budget,
    ) -> ScheduleDecision;
}

/// Chooses radix-cache victims. See the `evictor` world in `wit/worlds.wit`.
pub trait Evictor {
    /// Short human-readable name.
    fn name(&self) -> String;
    /// Leaves to evict, most expendable first.
    fn pick_victims(&mut self, leaves: &[CacheLeaf], pages_needed: u32) -> Vec<u64>;
}

/// Chooses how tokens are drawn. See the `sampler` world in `wit/worlds.wit`.
pub trait Sampler {
    /// Short human-readable name.
    fn name(&self) -> String;
    /// One plan per request, same order.
    fn plan(&mut self, requests: &[SampleRequest], vocab_size: u32) -> Vec<SamplePlan>;
    /// One token per candidate list, same order.
    fn pick(&mut self, lists: &[CandidateList]) -> Vec<u32>;
}

/// Exports `$ty` (a [`Scheduler`] + `Default`) as the `scheduler` world of
/// this component. Also defines `pub fn __minisgl_policy() -> $ty`, which
/// native code (tests) can call. Use once per crate.
#[macro_export]
macro_rules! export_scheduler {
    ($ty:ty) => {
        $crate::export_world!(scheduler, Scheduler, $ty, {
            fn schedule(
                waiting: ::std::vec::Vec<w::RequestView>,
                running: ::std::vec::Vec<w::RequestView>,
                budget: w::Budget,
            ) -> w::ScheduleDecision {
                let waiting: ::std::vec::Vec<$crate::RequestView> = $crate::__private::all(waiting);
                let running: ::std::vec::Vec<$crate::RequestView> = $crate::__private::all(running);
                let budget: $crate::Budget = budget.into();
                POLICY
                    .with_borrow_mut(|p| {
                        <$ty as $crate::Scheduler>::schedule(p, &waiting, &running, &budget)
                    })
                    .into()
            }
        });
    };
}

/// Exports `$ty` (an [`Evictor`] + `Default`) as the `evictor` world of this
/// component. Also defines `pub fn __minisgl_policy() -> $ty`. Use once per crate.
#[macro_export]
macro_rules! export_evictor {
    ($ty:ty) => {
        $crate::export_world!(evictor, Evictor, $ty, {
            fn pick_victims(
                leaves: ::std::vec::Vec<w::CacheLeaf>,
                pages_needed: u32,
            ) -> ::std::vec::Vec<u64> {
                let leaves: ::std::vec::Vec<$crate::CacheLeaf> = $crate::__private::all(leaves);
                POLICY.with_borrow_mut(|p| {
                    <$ty as $crate::Evictor>::pick_victims(p, &leaves, pages_needed)
                })
            }
        });
    };
}

/// Exports `$ty` (a [`Sampler`] + `Default`) as the `sampler` world of this
/// component. Also defines `pub fn __minisgl_policy() -> $ty`. Use once per crate.
#[macro_export]
macro_rules! export_sampler {
    ($ty:ty) => {
        $crate::export_world!(sampler, Sampler, $ty, {
            fn plan(
                requests: ::std::vec::Vec<w::SampleRequest>,
                vocab_size: u32,
            ) -> ::std::vec::Vec<w::SamplePlan> {
                let requests: ::std::vec::Vec<$crate::SampleRequest> =
                    $crate::__private::all(requests);
                let plans = POLICY
                    .with_borrow_mut(|p| <$ty as $crate::Sampler>::plan(p, &requests, vocab_size));
                $crate::__private::all(plans)
            }
            fn pick(lists: ::std::vec::Vec<w::CandidateList>) -> ::std::vec::Vec<u32> {
                let lists: ::std::vec::Vec<$crate::CandidateList> = $crate::__private::all(lists);
                POLICY.with_borrow_mut(|p| <$ty as $crate::Sampler>::pick(p, &lists))
            }
        });
    };
}

/// The part the three export macros share, parameterised by world: the
/// native constructor, the per-instance policy value, `name`, and the
/// component export of `$world` with the world's own methods (which see the
/// policy as `POLICY` and the WIT records as `w`). Not a stable interface.
#[doc(hidden)]
#[macro_export]
macro_rules! export_world {
    ($world:ident, $trait:ident, $ty:ty, { $($methods:tt)* }) => {
        /// The policy this crate exports, for native use.
        #[doc(hidden)]
        pub fn __minisgl_policy() -> $ty {
            <$ty as ::core::default::Default>::default()
        }

        #[cfg(target_arch = "wasm32")]
        const _: () = {
            use $crate::wit::types as w;
            struct Export;
            ::std::thread_local! {
                static POLICY: ::core::cell::RefCell<$ty> =
                    ::core::cell::RefCell::new(<$ty as ::core::default::Default>::default());
            }
            impl $crate::wit::$world::Guest for Export {
                fn name() -> ::std::string::String {
                    POLICY.with_borrow(|p| <$ty as $crate::$trait>::name(p))
                }
                $($methods)*
            }
            $crate::wit::$world::export_world!(Export with_types_in $crate::wit::$world);
        };
    };
}
