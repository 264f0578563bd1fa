//! Boot-phase timing: `ONERING_TRACE=1` prints, on stderr, when each phase of a run
//! ended (since the start, and since the previous mark). Off, a mark costs a branch.

/// Marks collected during a run, printed at its end.
pub struct Trace {
    on: bool,
    start: std::time::Instant,
    marks: std::sync::Mutex<Vec<(&'static str, std::time::Instant)>>,
}

impl Trace {
    /// A trace that records only if `ONERING_TRACE` is set.
    pub fn from_env() -> Self {
        Trace {
            on: std::env::var_os("ONERING_TRACE").is_some(),
            start: std::time::Instant::now(),
            marks: Default::default(),
        }
    }

    /// Records that phase `what` ended now.
    pub fn mark(&self, what: &'static str) {
        if self.on {
            self.marks.lock().unwrap_or_else(|e| e.into_inner()).push((what, std::time::Instant::now()));
        }
    }

    /// Prints the marks on stderr.
    pub fn print(&self) {
        let mut prev = self.start;
        for (what, t) in self.marks.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            say!(
                "onering: trace {:>8.1} us  +{:>7.1} us  {what}",
                (*t - self.start).as_secs_f64() * 1e6,
                (*t - prev).as_secs_f64() * 1e6
            );
            prev = *t;
        }
    }
}
