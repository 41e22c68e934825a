//! Which backend runs the model, and what that means for KV memory.

/// Which backend to run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum DeviceKind {
    Cpu,
    Cuda,
    /// CUDA when a driver and GPU are present, else CPU.
    #[default]
    Auto,
}

impl std::str::FromStr for DeviceKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "cpu" => Ok(DeviceKind::Cpu),
            "cuda" => Ok(DeviceKind::Cuda),
            "auto" => Ok(DeviceKind::Auto),
            o => Err(format!("unknown device `{o}` (expected cpu, cuda or auto)")),
        }
    }
}

impl std::fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DeviceKind::Cpu => "cpu",
            DeviceKind::Cuda => "cuda",
            DeviceKind::Auto => "auto",
        })
    }
}

/// As it is spelled on the command line (`--print-config` shows it).
impl serde::Serialize for DeviceKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl DeviceKind {
    /// Bytes of one KV cache element: the CPU backend stores f32, CUDA bf16.
    /// `Auto` counts CUDA's 2 (a fallback to the CPU then gets half the pages
    /// the budget would allow there, never more memory than asked).
    pub fn kv_elem_bytes(self) -> u32 {
        match self {
            DeviceKind::Cpu => 4,
            DeviceKind::Cuda | DeviceKind::Auto => 2,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::DeviceKind;

    #[test]
    fn kv_elements_are_f32_on_cpu_and_bf16_on_cuda() {
        assert_eq!(DeviceKind::Cpu.kv_elem_bytes(), 4);
        assert_eq!(DeviceKind::Cuda.kv_elem_bytes(), 2);
        assert_eq!(DeviceKind::Auto.kv_elem_bytes(), 2);
    }
}
