//! The stage bookkeeping of `repro`: each stage runs unless a stage it needs did not pass,
//! and every outcome (ok, failed, not run, each with its reason) lands in stages.json as soon
//! as it is known, so a crash mid-pipeline leaves the record of what ran.

use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// One stage's outcome, as stages.json records it.
#[derive(Serialize, Clone, Debug)]
pub struct Stage {
    /// Name.
    pub stage: String,
    /// "ok", "failed: …" or "not run: …".
    pub status: String,
    /// Wall time.
    pub seconds: f64,
    /// Files it wrote, relative to the artifacts folder.
    pub artifacts: Vec<String>,
}

impl Stage {
    /// Whether it ran and passed.
    pub fn passed(&self) -> bool {
        self.status == "ok"
    }

    /// Whether it was not run.
    pub fn not_run(&self) -> bool {
        self.status.starts_with("not run")
    }
}

/// What a stage's body reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every gate held.
    Passed,
    /// A gate did not hold, or the stage broke; the reason.
    Failed(String),
    /// The stage found it cannot run here (e.g. profile without ncu); the reason.
    NotRun(String),
}

/// A dependency: the stage `stage` must have passed, because `why`.
#[derive(Debug, Clone, Copy)]
pub struct Need<'a> {
    /// The stage needed.
    pub stage: &'a str,
    /// Why its result matters to the dependent, for the not-run reason.
    pub why: &'a str,
}

/// The stages so far, written to `<dir>/stages.json` after each.
pub struct Pipeline {
    dir: PathBuf,
    /// In run order.
    pub stages: Vec<Stage>,
}

impl Pipeline {
    /// An empty pipeline recording into `dir`.
    pub fn new(dir: &Path) -> Pipeline {
        Pipeline {
            dir: dir.to_path_buf(),
            stages: Vec::new(),
        }
    }

    /// The recorded stage `name`.
    pub fn get(&self, name: &str) -> Option<&Stage> {
        self.stages.iter().find(|s| s.stage == name)
    }

    /// Why `needs` stop a stage: the first needed stage that did not pass (or never
    /// appeared), as "`<stage>` failed: `<why>`" or "`<stage>` was not run: `<why>`". The
    /// needed stage's own reason is on its own row.
    pub fn blocked_by(&self, needs: &[Need]) -> Option<String> {
        needs.iter().find_map(|n| match self.get(n.stage) {
            Some(s) if s.passed() => None,
            Some(s) if s.not_run() => Some(format!("{} was not run: {}", n.stage, n.why)),
            Some(_) => Some(format!("{} failed: {}", n.stage, n.why)),
            None => Some(format!("{} was not run: {}", n.stage, n.why)),
        })
    }

    /// Runs stage `name` (unless `needs` stop it), records its outcome and the `artifacts`
    /// it left, and returns whether it passed.
    pub fn run(
        &mut self,
        name: &str,
        needs: &[Need],
        artifacts: &[&str],
        body: impl FnOnce() -> Outcome,
    ) -> bool {
        if let Some(why) = self.blocked_by(needs) {
            self.not_run(name, &why);
            return false;
        }
        eprintln!("\n==> {name}");
        let t0 = Instant::now();
        let status = match body() {
            Outcome::Passed => "ok".to_string(),
            Outcome::Failed(why) => format!("failed: {why}"),
            Outcome::NotRun(why) => format!("not run: {why}"),
        };
        eprintln!("<== {name}: {status} ({:.0} s)", t0.elapsed().as_secs_f64());
        let artifacts = artifacts
            .iter()
            .filter(|a| self.dir.join(a).exists())
            .map(|s| s.to_string())
            .collect();
        self.push(Stage {
            stage: name.into(),
            status,
            seconds: t0.elapsed().as_secs_f64(),
            artifacts,
        })
    }

    /// Records stage `name` as not run, with the reason.
    pub fn not_run(&mut self, name: &str, why: &str) {
        eprintln!("\n==> {name}: not run: {why}");
        self.push(Stage {
            stage: name.into(),
            status: format!("not run: {why}"),
            seconds: 0.0,
            artifacts: vec![],
        });
    }

    fn push(&mut self, s: Stage) -> bool {
        let passed = s.passed();
        self.stages.push(s);
        let text = serde_json::to_string_pretty(&serde_json::json!({ "stages": self.stages }))
            .expect("stages serialize");
        if let Err(e) = std::fs::write(self.dir.join("stages.json"), text) {
            eprintln!("warning: cannot write stages.json: {e}");
        }
        passed
    }

    /// Whether any stage failed.
    pub fn any_failed(&self) -> bool {
        self.stages.iter().any(|s| s.status.starts_with("failed"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NEEDS_A: Need = Need {
        stage: "a",
        why: "b reads a's output",
    };

    #[test]
    fn a_failed_stage_stops_its_dependents_with_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = Pipeline::new(dir.path());
        std::fs::write(dir.path().join("a.json"), "{}").unwrap();
        assert!(!p.run("a", &[], &["a.json", "missing.json"], || {
            Outcome::Failed("a gate did not hold".into())
        }));
        let ran_b = std::cell::Cell::new(false);
        assert!(!p.run("b", &[NEEDS_A], &[], || {
            ran_b.set(true);
            Outcome::Passed
        }));
        assert!(!ran_b.get(), "a dependent of a failed stage must not run");
        let needs_b = [Need {
            stage: "b",
            why: "c explains b",
        }];
        assert!(!p.run("c", &needs_b, &[], || panic!("c must not run")));
        // A stage needing nothing still runs; one that reports not run is not a failure.
        assert!(p.run("report", &[], &[], || Outcome::Passed));
        assert!(!p.run("profile", &[], &[], || Outcome::NotRun(
            "ncu is not on PATH".into()
        )));

        let status = |n: &str| p.get(n).unwrap().status.clone();
        assert_eq!(status("a"), "failed: a gate did not hold");
        assert_eq!(status("b"), "not run: a failed: b reads a's output");
        assert_eq!(status("c"), "not run: b was not run: c explains b");
        assert_eq!(status("report"), "ok");
        assert_eq!(status("profile"), "not run: ncu is not on PATH");
        assert_eq!(p.get("a").unwrap().artifacts, ["a.json"]);
        assert!(p.any_failed());

        // stages.json holds all five, in order, with the reasons.
        let text = std::fs::read_to_string(dir.path().join("stages.json")).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let names: Vec<&str> = v["stages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["stage"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["a", "b", "c", "report", "profile"]);
        assert_eq!(
            v["stages"][1]["status"],
            "not run: a failed: b reads a's output"
        );
    }

    #[test]
    fn a_need_never_recorded_blocks_too() {
        let dir = tempfile::tempdir().unwrap();
        let mut p = Pipeline::new(dir.path());
        assert!(!p.run("b", &[NEEDS_A], &[], || Outcome::Passed));
        assert_eq!(
            p.get("b").unwrap().status,
            "not run: a was not run: b reads a's output"
        );
        assert!(!p.any_failed());
    }
}
