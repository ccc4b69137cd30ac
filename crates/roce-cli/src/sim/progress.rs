//! A progress bar for fabric runs, fed through [`roce_fabric::Progress`];
//! drawn on stderr only when stderr is a terminal.

use std::io::IsTerminal as _;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use roce_fabric::{Progress, Time};

/// Simulated picoseconds per microsecond shown.
const PS_PER_US: f64 = 1e6;
const TEMPLATE: &str = "{prefix} [{bar:40}] {pos}/{len} flows  {msg}  ({elapsed})";

pub struct Bar {
    bar: ProgressBar,
}

impl Bar {
    /// A bar named `prefix`, hidden unless stderr is a terminal.
    pub fn new(prefix: &str, total: usize) -> Bar {
        let target = if std::io::stderr().is_terminal() {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = ProgressBar::with_draw_target(Some(total as u64), target);
        if let Ok(style) = ProgressStyle::with_template(TEMPLATE) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_prefix(prefix.to_string());
        Bar { bar }
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

impl Progress for Bar {
    fn update(&mut self, now: Time, done: usize, total: usize) {
        self.bar.set_length(total as u64);
        self.bar.set_position(done as u64);
        self.bar.set_message(format!("t = {:.1} us", now as f64 / PS_PER_US));
    }
}
