//! `instructions-check`: the regression gate over the Gungraun instruction-count benches.
//!
//! `instructions-check check BASELINE SUMMARY` reads the JSON lines Gungraun prints with
//! `--output-format=json` (one object per bench) and compares each bench's callgrind
//! instruction count (`Ir`) with the committed baseline: it fails (exit 1) when any bench grew
//! by more than [`MAX_GROWTH_PCT`] percent, when a baselined bench did not run, or when a bench
//! has no baseline. `instructions-check rebaseline BASELINE SUMMARY` writes the baseline from
//! a run instead. `scripts/bench-instructions` runs the benches and then this.
//!
//! Instruction counts are exact and repeat from run to run for one toolchain and valgrind, so
//! the threshold is for real changes in the code, not noise. A shrink of more than the
//! threshold passes with a note to re-baseline, so the gate stays tight.

#![allow(clippy::print_stdout, clippy::print_stderr)] // a command-line tool reports on the terminal

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, ExitCode};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Growth of a bench's instruction count over its baseline that fails the check, percent.
const MAX_GROWTH_PCT: u64 = 5;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mode, baseline, summary) = match args.as_slice() {
        [m, b, s] if m == "check" || m == "rebaseline" => (m.as_str(), b, s),
        _ => {
            eprintln!(
                "usage: instructions-check check|rebaseline BASELINE.json SUMMARY.jsonl\n\
                 SUMMARY is what `cargo bench --bench instructions -- --output-format=json` \
                 printed; scripts/bench-instructions runs both steps"
            );
            return ExitCode::from(2);
        }
    };
    match run(mode, Path::new(baseline), Path::new(summary)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("instructions-check: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(mode: &str, baseline_path: &Path, summary_path: &Path) -> Result<bool, String> {
    let summary = std::fs::read_to_string(summary_path)
        .map_err(|e| format!("cannot read {}: {e}", summary_path.display()))?;
    let current = parse_summary(&summary)?;
    if current.is_empty() {
        return Err(format!(
            "no bench results in {} (did the benches run?)",
            summary_path.display()
        ));
    }
    let env = Environment::here();
    if mode == "rebaseline" {
        let b = Baseline {
            note: "Callgrind instruction counts (Ir) of benches/instructions.rs. Written by \
                   `scripts/bench-instructions --rebaseline`; commit it with the change that \
                   explains the new figures."
                .to_owned(),
            environment: env,
            instructions: current,
        };
        let mut text = serde_json::to_string_pretty(&b).map_err(|e| e.to_string())?;
        text.push('\n');
        std::fs::write(baseline_path, text)
            .map_err(|e| format!("cannot write {}: {e}", baseline_path.display()))?;
        println!(
            "baseline of {} benches written to {}",
            b.instructions.len(),
            baseline_path.display()
        );
        return Ok(true);
    }
    let text = std::fs::read_to_string(baseline_path)
        .map_err(|e| format!("cannot read the baseline {}: {e}", baseline_path.display()))?;
    let baseline: Baseline = serde_json::from_str(&text)
        .map_err(|e| format!("{} is not a baseline: {e}", baseline_path.display()))?;
    if baseline.environment != env {
        println!(
            "note: the baseline was recorded with {}; this run used {}. Counts can shift \
             between toolchain or valgrind versions: if every bench moved alike, re-baseline.",
            baseline.environment, env
        );
    }
    let verdicts = check(&baseline.instructions, &current, MAX_GROWTH_PCT);
    print!("{}", table(&verdicts));
    let failed: Vec<&Verdict> = verdicts.iter().filter(|v| v.fails()).collect();
    if failed.is_empty() {
        println!(
            "instruction counts: {} benches within {MAX_GROWTH_PCT} % of the baseline",
            verdicts.len()
        );
        Ok(true)
    } else {
        println!(
            "\nFAILED: {} of {} benches (more than {MAX_GROWTH_PCT} % more instructions, or \
             missing from the run or the baseline). A deliberate change: \
             `scripts/bench-instructions --rebaseline` and commit benches/instructions-baseline.json.",
            failed.len(),
            verdicts.len()
        );
        Ok(false)
    }
}

/// The committed baseline.
#[derive(Debug, Serialize, Deserialize)]
struct Baseline {
    note: String,
    environment: Environment,
    /// Bench (`group::function.id`) → instructions.
    instructions: BTreeMap<String, u64>,
}

/// What the counts depend on besides the code.
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Environment {
    rustc: String,
    valgrind: String,
}

impl Environment {
    fn here() -> Self {
        let version = |cmd: &str, arg: &str| {
            Command::new(cmd)
                .arg(arg)
                .output()
                .ok()
                .and_then(|o| String::from_utf8(o.stdout).ok())
                .map_or_else(|| "unknown".to_owned(), |s| s.trim().to_owned())
        };
        Environment {
            rustc: version("rustc", "-V"),
            valgrind: version("valgrind", "--version"),
        }
    }
}

impl std::fmt::Display for Environment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} and {}", self.rustc, self.valgrind)
    }
}

/// Bench name → callgrind instruction count, from Gungraun's JSON lines.
fn parse_summary(text: &str) -> Result<BTreeMap<String, u64>, String> {
    let mut out = BTreeMap::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let v: Value = serde_json::from_str(line)
            .map_err(|e| format!("summary line {}: not JSON ({e})", i + 1))?;
        let field = |k: &str| {
            v.get(k)
                .and_then(Value::as_str)
                .ok_or_else(|| format!("summary line {}: no `{k}`", i + 1))
        };
        // `instructions::latency::record` → `latency::record`, plus the bench id.
        let module = field("module_path")?;
        let module = module.split_once("::").map_or(module, |(_, rest)| rest);
        let name = format!("{module}.{}", field("id")?);
        let ir = v
            .get("profiles")
            .and_then(Value::as_array)
            .and_then(|ps| {
                ps.iter()
                    .find(|p| p.get("tool").and_then(Value::as_str) == Some("Callgrind"))
            })
            .and_then(|p| p.pointer("/data/total/metrics/Ir/values/new"))
            .and_then(Value::as_u64)
            .ok_or_else(|| format!("{name}: no callgrind instruction count (Ir) in the summary"))?;
        if out.insert(name.clone(), ir).is_some() {
            return Err(format!("{name} appears twice in the summary"));
        }
    }
    Ok(out)
}

/// One bench's outcome.
#[derive(Debug, Clone, PartialEq)]
enum Verdict {
    Within { name: String, base: u64, now: u64 },
    Grew { name: String, base: u64, now: u64 },
    Shrank { name: String, base: u64, now: u64 },
    NotRun { name: String, base: u64 },
    NoBaseline { name: String, now: u64 },
}

impl Verdict {
    fn fails(&self) -> bool {
        matches!(
            self,
            Verdict::Grew { .. } | Verdict::NotRun { .. } | Verdict::NoBaseline { .. }
        )
    }
}

/// Compares in integers, so exactly +5 % is within and one instruction more is not.
fn check(
    baseline: &BTreeMap<String, u64>,
    current: &BTreeMap<String, u64>,
    max_pct: u64,
) -> Vec<Verdict> {
    let mut out = Vec::new();
    for (name, &base) in baseline {
        let name = name.clone();
        out.push(match current.get(&name) {
            None => Verdict::NotRun { name, base },
            Some(&now) => {
                let (b, n, m) = (u128::from(base), u128::from(now), u128::from(max_pct));
                if n * 100 > b * (100 + m) {
                    Verdict::Grew { name, base, now }
                } else if n * 100 < b * (100 - m.min(100)) {
                    Verdict::Shrank { name, base, now }
                } else {
                    Verdict::Within { name, base, now }
                }
            }
        });
    }
    for (name, &now) in current {
        if !baseline.contains_key(name) {
            out.push(Verdict::NoBaseline {
                name: name.clone(),
                now,
            });
        }
    }
    out
}

fn change_pct(base: u64, now: u64) -> f64 {
    if base == 0 {
        return if now == 0 { 0.0 } else { f64::INFINITY };
    }
    (now as f64 / base as f64 - 1.0) * 100.0
}

fn table(verdicts: &[Verdict]) -> String {
    let width = verdicts
        .iter()
        .map(|v| match v {
            Verdict::Within { name, .. }
            | Verdict::Grew { name, .. }
            | Verdict::Shrank { name, .. }
            | Verdict::NotRun { name, .. }
            | Verdict::NoBaseline { name, .. } => name.len(),
        })
        .max()
        .unwrap_or(0)
        .max(5);
    let mut s = format!(
        "{:width$}  {:>12}  {:>12}  {:>8}  verdict\n",
        "bench", "baseline", "now", "change"
    );
    for v in verdicts {
        let _ = match v {
            Verdict::Within { name, base, now } => writeln!(
                s,
                "{name:width$}  {base:>12}  {now:>12}  {:>+7.2}%  ok",
                change_pct(*base, *now)
            ),
            Verdict::Grew { name, base, now } => writeln!(
                s,
                "{name:width$}  {base:>12}  {now:>12}  {:>+7.2}%  REGRESSED (more than +{MAX_GROWTH_PCT} %)",
                change_pct(*base, *now)
            ),
            Verdict::Shrank { name, base, now } => writeln!(
                s,
                "{name:width$}  {base:>12}  {now:>12}  {:>+7.2}%  faster: re-baseline to keep the gate tight",
                change_pct(*base, *now)
            ),
            Verdict::NotRun { name, base } => writeln!(
                s,
                "{name:width$}  {base:>12}  {:>12}  {:>8}  NOT RUN (renamed or removed? re-baseline)",
                "-", "-"
            ),
            Verdict::NoBaseline { name, now } => writeln!(
                s,
                "{name:width$}  {:>12}  {now:>12}  {:>8}  NO BASELINE (new bench? re-baseline)",
                "-", "-"
            ),
        };
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(entries: &[(&str, u64)]) -> BTreeMap<String, u64> {
        entries.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn growth_beyond_five_percent_fails_and_within_passes() {
        let base = map(&[("a.x", 1000), ("b.y", 1000), ("c.z", 1000)]);
        let now = map(&[("a.x", 1050), ("b.y", 1051), ("c.z", 900)]);
        let v = check(&base, &now, 5);
        assert_eq!(
            v,
            [
                Verdict::Within {
                    name: "a.x".into(),
                    base: 1000,
                    now: 1050
                },
                Verdict::Grew {
                    name: "b.y".into(),
                    base: 1000,
                    now: 1051
                },
                Verdict::Shrank {
                    name: "c.z".into(),
                    base: 1000,
                    now: 900
                },
            ]
        );
        assert_eq!(v.iter().filter(|v| v.fails()).count(), 1);
        assert!(table(&v).contains("REGRESSED"));
    }

    #[test]
    fn missing_and_new_benches_fail() {
        let v = check(&map(&[("old.x", 10)]), &map(&[("new.x", 10)]), 5);
        assert!(v.iter().all(Verdict::fails), "{v:?}");
    }

    #[test]
    fn reads_gungraun_json_lines() {
        let line = r#"{"module_path":"instructions::latency::record","id":"samples_4096","profiles":[{"tool":"Callgrind","data":{"total":{"metrics":{"Ir":{"values":{"new":409701,"old":409000}}}}}}]}"#;
        let m = parse_summary(&format!("{line}\n\n")).unwrap();
        assert_eq!(m, map(&[("latency::record.samples_4096", 409701)]));
        assert!(
            parse_summary(&format!("{line}\n{line}"))
                .unwrap_err()
                .contains("twice")
        );
        assert!(
            parse_summary(r#"{"module_path":"a::b","id":"c","profiles":[]}"#)
                .unwrap_err()
                .contains("no callgrind instruction count")
        );
        assert!(parse_summary("Instructions: 12").is_err());
    }
}
