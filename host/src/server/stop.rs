//! Stop strings over a stream of text deltas.
//!
//! Text that could still turn into a stop string is held back, so a client
//! never receives the first half of a stop sequence; when one matches, the
//! text is cut there and the caller aborts the request.

/// Result of feeding one text delta.
#[derive(Debug, PartialEq, Eq)]
pub enum StopStep {
    /// Text that is safe to send now (maybe empty).
    Continue(String),
    /// A stop string matched: send this last piece and finish with `stop`.
    Stopped(String),
}

/// Matches stop strings across deltas.
#[derive(Debug, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    pending: String,
    include_stop: bool,
}

impl StopMatcher {
    /// `include_stop` keeps the matched string in the output.
    pub fn new(stops: Vec<String>, include_stop: bool) -> Self {
        StopMatcher {
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            pending: String::new(),
            include_stop,
        }
    }

    /// Feeds a delta; returns what can be sent.
    pub fn push(&mut self, delta: &str) -> StopStep {
        if self.stops.is_empty() {
            return StopStep::Continue(delta.to_string());
        }
        self.pending.push_str(delta);
        // Earliest match wins; ties go to the longer stop string.
        let hit = self
            .stops
            .iter()
            .filter_map(|s| self.pending.find(s.as_str()).map(|pos| (pos, s.len())))
            .min_by_key(|&(pos, len)| (pos, usize::MAX - len));
        if let Some((pos, len)) = hit {
            let end = if self.include_stop { pos + len } else { pos };
            let out = self.pending[..end].to_string();
            self.pending.clear();
            return StopStep::Stopped(out);
        }
        let hold = self.held_suffix_start();
        let out = self.pending[..hold].to_string();
        self.pending.drain(..hold);
        StopStep::Continue(out)
    }

    /// The generation ended without a match: release what was held.
    pub fn flush(&mut self) -> String {
        std::mem::take(&mut self.pending)
    }

    /// Start of the longest suffix of `pending` that is a proper prefix of a
    /// stop string (`pending.len()` when none is).
    fn held_suffix_start(&self) -> usize {
        let p = &self.pending;
        for (start, _) in p.char_indices() {
            let tail = &p[start..];
            if self
                .stops
                .iter()
                .any(|s| s.len() > tail.len() && s.starts_with(tail))
            {
                return start;
            }
        }
        p.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], deltas: &[&str]) -> (String, bool) {
        let mut m = StopMatcher::new(stops.iter().map(|s| s.to_string()).collect(), false);
        let mut out = String::new();
        for d in deltas {
            match m.push(d) {
                StopStep::Continue(t) => out.push_str(&t),
                StopStep::Stopped(t) => {
                    out.push_str(&t);
                    return (out, true);
                }
            }
        }
        out.push_str(&m.flush());
        (out, false)
    }

    #[test]
    fn match_across_deltas_is_cut() {
        assert_eq!(
            run(&["END"], &["hello E", "N", "D more"]),
            ("hello ".into(), true)
        );
        assert_eq!(run(&["\n\n"], &["a\n", "\nb"]), ("a".into(), true));
    }

    #[test]
    fn false_prefix_is_released() {
        assert_eq!(run(&["END"], &["hello E", "x"]), ("hello Ex".into(), false));
        assert_eq!(run(&["END"], &["EN"]), ("EN".into(), false));
    }

    #[test]
    fn held_text_is_not_sent_early() {
        let mut m = StopMatcher::new(vec!["stop".into()], false);
        assert_eq!(m.push("a st"), StopStep::Continue("a ".into()));
        assert_eq!(m.push("o"), StopStep::Continue(String::new()));
        assert_eq!(m.push("p!"), StopStep::Stopped(String::new()));
    }

    #[test]
    fn earliest_match_and_include() {
        let mut m = StopMatcher::new(vec!["b".into(), "ab".into()], true);
        assert_eq!(m.push("xaby"), StopStep::Stopped("xab".into()));
        assert_eq!(run(&["é!"], &["caf", "é", "!"]), ("caf".into(), true));
    }
}
