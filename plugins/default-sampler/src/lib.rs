//! placeholder until the plugin work lands
