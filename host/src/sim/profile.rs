//! The profile file: the step times measured on a device, and the cost model
//! fitted on them (JSON, `format: "minisgl-step-profile/1"`).
//!
//! The measured points are kept so a profile can be re-fitted, checked
//! (`reproduction_error`) and plotted; the fitted model is kept so the
//! simulator reads it without fitting.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::cost::{CostModel, FitError, StepShape};

pub const FORMAT: &str = "minisgl-step-profile/1";

/// One measured step: `decode_batch` decodes at `decode_context` cached tokens
/// each, or one prefill chunk of `prefill_tokens` after `prefill_context`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProfilePoint {
    #[serde(default)]
    pub decode_batch: u64,
    #[serde(default)]
    pub decode_context: u64,
    #[serde(default)]
    pub prefill_tokens: u64,
    #[serde(default)]
    pub prefill_context: u64,
    /// Time per step when such steps run back to back as in the engine
    /// (seconds): device time, plus host time the pipeline does not hide.
    pub seconds: f64,
}

impl ProfilePoint {
    pub fn shape(&self) -> StepShape {
        if self.prefill_tokens > 0 {
            StepShape::prefill(self.prefill_tokens, self.prefill_context)
        } else {
            StepShape::decode(self.decode_batch, self.decode_context)
        }
    }
}

/// A profile file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    pub format: String,
    /// `cpu` or `cuda`.
    pub device: String,
    /// A free-form description of the device (GPU name, CPU threads).
    pub device_name: String,
    /// The model or shape measured (a directory name).
    pub model: String,
    /// Tokens per KV page of the measured runner.
    pub page_size: u32,
    /// KV pages the engine gets on this device by default (its memory
    /// budget); the simulator's pool size unless told otherwise.
    pub kv_pages: u32,
    /// Commit and date of the measurement, and anything a reader should know.
    #[serde(default)]
    pub note: String,
    pub points: Vec<ProfilePoint>,
    pub model_fit: CostModel,
}

#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("reading profile {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("profile {path} is not a valid profile: {detail}")]
    Parse { path: String, detail: String },
    #[error("profile {path}: format is {found:?}, expected {FORMAT:?}")]
    Format { path: String, found: String },
    #[error(transparent)]
    Fit(#[from] FitError),
}

impl Profile {
    /// This profile's model fitted again on its own points plus `steps`
    /// (shape, seconds) timed in a real replay (`compare --backend cuda`
    /// writes them to steps-POLICY.csv), at the profile's knots. The isolated
    /// points miss what only a running engine shows (ragged contexts, the
    /// host work overlap does not hide); the replay's steps carry it. The
    /// points stay as measured; `note` says what was added.
    pub fn refit_with_steps(
        &self,
        steps: &[(StepShape, f64)],
        note: &str,
    ) -> Result<Profile, ProfileError> {
        let mut pts: Vec<(StepShape, f64)> =
            self.points.iter().map(|p| (p.shape(), p.seconds)).collect();
        let (dx, px) = CostModel::knots(&pts);
        pts.extend_from_slice(steps);
        let mut p = self.clone();
        p.model_fit = CostModel::fit_with_knots(&pts, &dx, &px)?;
        p.note = if self.note.is_empty() {
            note.to_string()
        } else {
            format!("{}; {note}", self.note)
        };
        Ok(p)
    }

    /// Fits the model on `points` and assembles the file.
    pub fn fit(
        device: &str,
        device_name: &str,
        model: &str,
        page_size: u32,
        kv_pages: u32,
        note: &str,
        points: Vec<ProfilePoint>,
    ) -> Result<Profile, ProfileError> {
        let pts: Vec<(StepShape, f64)> = points.iter().map(|p| (p.shape(), p.seconds)).collect();
        Ok(Profile {
            format: FORMAT.into(),
            device: device.into(),
            device_name: device_name.into(),
            model: model.into(),
            page_size,
            kv_pages,
            note: note.into(),
            points,
            model_fit: CostModel::fit(&pts)?,
        })
    }

    pub fn load(path: &Path) -> Result<Profile, ProfileError> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ProfileError::Io {
            path: p.clone(),
            source,
        })?;
        let prof: Profile = serde_json::from_str(&text).map_err(|e| ProfileError::Parse {
            path: p.clone(),
            detail: e.to_string(),
        })?;
        if prof.format != FORMAT {
            return Err(ProfileError::Format {
                path: p,
                found: prof.format,
            });
        }
        Ok(prof)
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a profile serialises")
    }

    /// Per point: (point, predicted seconds, relative error).
    pub fn reproduction(&self) -> Vec<(ProfilePoint, f64, f64)> {
        self.points
            .iter()
            .map(|p| {
                let pred = self.model_fit.step_us(&p.shape()) * 1e-6;
                (p.clone(), pred, (pred - p.seconds) / p.seconds)
            })
            .collect()
    }

    /// Largest relative error of the model on the profile's own points.
    pub fn reproduction_error(&self) -> f64 {
        self.reproduction()
            .iter()
            .map(|r| r.2.abs())
            .fold(0.0, f64::max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(decode_batch: u64, prefill_tokens: u64, ms: f64) -> ProfilePoint {
        ProfilePoint {
            decode_batch,
            decode_context: if decode_batch > 0 { 1000 } else { 0 },
            prefill_tokens,
            prefill_context: 0,
            seconds: ms / 1e3,
        }
    }

    /// Isolated points say a decode step costs 1-2 ms; a replay's 200 steps
    /// say 20% more. The refit follows the steps (they outnumber the
    /// points), keeps the knots, and keeps the measured points as they were.
    #[test]
    fn a_refit_follows_the_replay_steps() {
        let points = vec![
            point(1, 0, 1.0),
            point(64, 0, 2.0),
            point(0, 128, 3.0),
            point(0, 2048, 20.0),
        ];
        let p = Profile::fit("cuda", "test", "m", 16, 100, "", points.clone()).unwrap();
        let steps: Vec<(StepShape, f64)> = (0..200)
            .map(|i| {
                let b = 1 + (i % 64) as u64;
                let s = StepShape::decode(b, 1000);
                (s, 1.2 * p.model_fit.step_us(&s) / 1e6)
            })
            .collect();
        let r = p
            .refit_with_steps(&steps, "refitted on test steps")
            .unwrap();
        assert_eq!(r.points, points);
        assert_eq!(
            r.model_fit.decode_knots.len(),
            p.model_fit.decode_knots.len()
        );
        assert!(r.note.contains("refitted on test steps"));
        for (s, secs) in &steps {
            let got = r.model_fit.step_us(s) / 1e6;
            assert!(
                (got / secs - 1.0).abs() < 0.03,
                "{s:?}: refit {got}, replay {secs}"
            );
        }
        // Prefill, which no step covered, is still priced by the points.
        let pre = StepShape::prefill(128, 0);
        let (a, b) = (p.model_fit.step_us(&pre), r.model_fit.step_us(&pre));
        assert!((b / a - 1.0).abs() < 0.05, "{a} vs {b}");
        assert!(p
            .refit_with_steps(&[(StepShape::decode(1, 1), -1.0)], "")
            .is_err());
    }
}
