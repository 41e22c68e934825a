//! Errors of the CUDA layer, mapped onto [`BackendError`] at the trait boundary.

use crate::backend::BackendError;

/// What can go wrong below the Backend trait.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    /// A CUDA library could not be found or loaded.
    #[error("{0}")]
    Missing(String),
    /// NVRTC rejected a kernel source.
    #[error("NVRTC failed to compile kernels/{family}.cu for {arch}: {log}")]
    Compile {
        family: &'static str,
        arch: String,
        log: String,
    },
    /// A driver call failed.
    #[error("CUDA driver: {0}")]
    Driver(String),
    /// A cuBLAS call failed.
    #[error("cuBLAS: {0}")]
    Blas(String),
    /// The device or its kernels cannot run this shape or configuration.
    #[error("unsupported: {0}")]
    Unsupported(String),
}

impl From<cudarc::driver::DriverError> for CudaError {
    fn from(e: cudarc::driver::DriverError) -> Self {
        CudaError::Driver(format!("{e:?}"))
    }
}

impl From<cudarc::cublas::result::CublasError> for CudaError {
    fn from(e: cudarc::cublas::result::CublasError) -> Self {
        CudaError::Blas(format!("{e:?}"))
    }
}

impl From<CudaError> for BackendError {
    fn from(e: CudaError) -> Self {
        match e {
            CudaError::Unsupported(m) => BackendError::Unsupported(m),
            CudaError::Driver(m) if m.contains("OUT_OF_MEMORY") => BackendError::OutOfMemory(m),
            other => BackendError::Device(other.to_string()),
        }
    }
}

impl From<cudarc::driver::DriverError> for BackendError {
    fn from(e: cudarc::driver::DriverError) -> Self {
        CudaError::from(e).into()
    }
}
