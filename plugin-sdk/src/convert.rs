//! The guest side of the plain <-> WIT conversions: `From` both ways for the
//! wit-bindgen records, expanded from [`crate::wit_conversions!`] (the one
//! list of the records' fields, which the host's bindings expand too). Moves
//! are field by field, no allocation beyond the lists.

use crate::wit::types as w;

crate::wit_conversions!(w);

/// Converts every element of a list.
pub fn all<A, B: From<A>>(items: Vec<A>) -> Vec<B> {
    items.into_iter().map(B::from).collect()
}
