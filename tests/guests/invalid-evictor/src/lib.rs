//! Hostile test guest: every call returns invalid victims; `pages_needed % 4`
//! picks how (the numbers are the host's rules E1-E3).

use minisgl_plugin_sdk::{CacheLeaf, Evictor};

/// A node id the host's tests hold locked (never offered as a leaf).
pub const LOCKED_NODE: u64 = 4242;

#[derive(Default)]
pub struct Liar;

impl Evictor for Liar {
    fn name(&self) -> String {
        "guest-invalid-evictor".into()
    }

    fn pick_victims(&mut self, leaves: &[CacheLeaf], pages_needed: u32) -> Vec<u64> {
        match pages_needed % 4 {
            // E1: a node that is not an offered leaf.
            0 => vec![u64::MAX - 3],
            // E1: a locked node.
            1 => vec![LOCKED_NODE],
            // E2: the same leaf twice.
            2 => leaves
                .iter()
                .chain(leaves.first())
                .map(|l| l.node)
                .collect(),
            // E3: nothing, though pages are needed and leaves exist.
            _ => Vec::new(),
        }
    }
}

minisgl_plugin_sdk::export_evictor!(Liar);
