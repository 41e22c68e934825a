//! `--model PATH` → config + weights + tokenizer.
//!
//! PATH may be an HF directory (`config.json`, `*.safetensors`,
//! `tokenizer.json`, …), a `.gguf` file, or a directory holding exactly one
//! `.gguf` file and no `config.json`.

use std::path::{Path, PathBuf};

use super::config::ModelConfig;
use super::tokenizer::{Tokenizer, TokenizerExtras};
use super::weights::{safetensors_files, RandomWeights, SafetensorsWeights, Weights};
use super::ModelError;

/// A model ready to be uploaded to a backend.
pub struct LoadedModel {
    pub config: ModelConfig,
    pub weights: Weights,
    /// `None` when the source has no tokenizer (random weights from a bare config).
    pub tokenizer: Option<Tokenizer>,
    /// Where it came from (for logs).
    pub source: PathBuf,
}

impl std::fmt::Debug for LoadedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedModel")
            .field("config", &self.config)
            .field("tokenizer", &self.tokenizer.is_some())
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

fn gguf_in_dir(dir: &Path) -> Result<Vec<PathBuf>, ModelError> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| ModelError::io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension()
                .is_some_and(|x| x.eq_ignore_ascii_case("gguf"))
        })
        .collect();
    v.sort();
    Ok(v)
}

/// Load a model from an HF directory or a GGUF file (see the module docs).
pub fn load(path: &Path) -> Result<LoadedModel, ModelError> {
    if !path.exists() {
        return Err(ModelError::io(path, "model path does not exist"));
    }
    if path.is_file() {
        if path
            .extension()
            .is_some_and(|x| x.eq_ignore_ascii_case("gguf"))
        {
            return load_gguf(path);
        }
        return Err(ModelError::io(
            path,
            "not a model: expected an HF directory or a .gguf file",
        ));
    }
    if !path.join("config.json").exists() {
        let ggufs = gguf_in_dir(path)?;
        return match ggufs.as_slice() {
            [one] => load_gguf(one),
            [] => Err(ModelError::io(
                &path.join("config.json"),
                "file not found (and no .gguf file in the directory)",
            )),
            many => Err(ModelError::io(
                path,
                format!(
                    "no config.json and {} .gguf files; pass one file: {:?}",
                    many.len(),
                    many
                ),
            )),
        };
    }
    load_hf(path)
}

fn read_config(path: &Path) -> Result<ModelConfig, ModelError> {
    let text = std::fs::read_to_string(path).map_err(|e| ModelError::io(path, e))?;
    ModelConfig::from_json_str(&text)
}

/// Shard files named by `model.safetensors.index.json`, or every
/// `*.safetensors` in the directory.
fn shard_files(dir: &Path) -> Result<Vec<PathBuf>, ModelError> {
    let index = dir.join("model.safetensors.index.json");
    if index.exists() {
        let text = std::fs::read_to_string(&index).map_err(|e| ModelError::io(&index, e))?;
        let v: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| ModelError::Weights(format!("{}: invalid JSON: {e}", index.display())))?;
        let map = v
            .get("weight_map")
            .and_then(|m| m.as_object())
            .ok_or_else(|| {
                ModelError::Weights(format!("{}: missing `weight_map`", index.display()))
            })?;
        let mut files: Vec<PathBuf> = map
            .values()
            .filter_map(|f| f.as_str())
            .map(|f| dir.join(f))
            .collect();
        files.sort();
        files.dedup();
        for f in &files {
            if !f.exists() {
                return Err(ModelError::io(f, "shard listed in the index is missing"));
            }
        }
        return Ok(files);
    }
    let files = safetensors_files(dir)?;
    if files.is_empty() {
        return Err(ModelError::io(
            &dir.join("model.safetensors"),
            "file not found (no *.safetensors in the directory)",
        ));
    }
    Ok(files)
}

fn load_hf(dir: &Path) -> Result<LoadedModel, ModelError> {
    let config = read_config(&dir.join("config.json"))?;
    let weights = Weights::Safetensors(SafetensorsWeights::open(&shard_files(dir)?)?);
    let tokenizer = if dir.join("tokenizer.json").exists() {
        Some(Tokenizer::from_dir(dir, config.eos_token_ids())?)
    } else {
        None
    };
    Ok(LoadedModel {
        config,
        weights,
        tokenizer,
        source: dir.to_path_buf(),
    })
}

fn load_gguf(path: &Path) -> Result<LoadedModel, ModelError> {
    // Quantised tensors stay in their blocks: the CPU backend computes on
    // them, other backends dequantise at upload.
    let g = super::gguf::load_quantized(path)
        .map_err(|e| ModelError::Weights(format!("{}: {e}", path.display())))?;
    let config = ModelConfig::from_json(&g.config)?;
    let tensors = g.tensors;
    let extras = TokenizerExtras {
        bos_token: g.bos_token,
        eos_token: g.eos_token,
        chat_template: g.chat_template,
        eos_ids: config.eos_token_ids().to_vec(),
        ..Default::default()
    };
    let tokenizer = Tokenizer::from_parts(g.tokenizer, extras)?;
    Ok(LoadedModel {
        config,
        weights: Weights::Gguf(tensors),
        tokenizer: Some(tokenizer),
        source: path.to_path_buf(),
    })
}

/// Random weights of a real shape, for benchmarks: `path` is a directory with
/// `config.json` (a tokenizer there is loaded too) or a `config.json` file.
/// Matrices are near-normal with mean 0 and std 0.02, norm weights 1, biases 0; the same seed
/// gives the same weights.
pub fn load_random(path: &Path, seed: u64) -> Result<LoadedModel, ModelError> {
    let (cfg_path, dir) = if path.is_dir() {
        (path.join("config.json"), Some(path))
    } else {
        (path.to_path_buf(), path.parent())
    };
    if !cfg_path.exists() {
        return Err(ModelError::io(&cfg_path, "file not found"));
    }
    let config = read_config(&cfg_path)?;
    let tokenizer = match dir {
        Some(d) if d.join("tokenizer.json").exists() => {
            Some(Tokenizer::from_dir(d, config.eos_token_ids())?)
        }
        _ => None,
    };
    Ok(LoadedModel {
        config,
        weights: Weights::Random(RandomWeights { seed }),
        tokenizer,
        source: path.to_path_buf(),
    })
}
