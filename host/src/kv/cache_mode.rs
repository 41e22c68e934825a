//! Whether finished requests' KV stays in the radix prefix cache.

/// Whether finished requests leave their KV in the radix prefix cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CacheMode {
    /// Prefix reuse through the radix tree.
    #[default]
    Radix,
    /// No reuse: every request prefills its whole prompt (for comparison).
    Naive,
}

impl std::str::FromStr for CacheMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "radix" => Ok(CacheMode::Radix),
            "naive" => Ok(CacheMode::Naive),
            other => Err(format!(
                "cache mode must be `radix` or `naive`, got `{other}`"
            )),
        }
    }
}
