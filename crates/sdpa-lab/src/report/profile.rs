//! The profile section of summary.md (and the body of profile.md): per case and kernel, ncu's
//! metrics, with the truth check (bench median beside ncu's call time) on the case's first
//! row.

use super::plots::format_value;
use super::Optional;
use crate::profile::{CaseProfile, ProfileFile};
use std::fmt::Write;

fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace(['\n', '\r'], " ")
}

fn num(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map(f).unwrap_or_else(|| "–".into())
}

fn pct(v: Option<f64>) -> String {
    num(v, |x| format!("{x:.1}"))
}

/// Appends the section; nothing when profile.json is absent (profiling is optional).
pub fn section(out: &mut String, p: &Optional<ProfileFile>) {
    match p {
        Optional::Absent => {}
        Optional::Unreadable(e) => {
            let _ = writeln!(
                out,
                "## Profile (profile.json)\n\nprofile.json could not be read: {}\n",
                cell(e)
            );
        }
        Optional::Present(p) => {
            out.push_str("## Profile (profile.json)\n\n");
            body(out, p);
        }
    }
}

/// The section's text without its heading.
pub fn body(out: &mut String, p: &ProfileFile) {
    if p.was_not_run() {
        let _ = writeln!(
            out,
            "Not run: {}\n",
            cell(p.reason.as_deref().unwrap_or(&p.status))
        );
        return;
    }
    let flagged = p.truth.iter().filter(|t| t.flagged).count();
    let profiled = p.cases.iter().filter(|c| c.is_ok()).count();
    let _ = writeln!(
        out,
        "{} case(s), {profiled} profiled; {flagged} where the bench median and ncu's time differ \
         by more than {} % (flagged). Status: {}.\n",
        p.cases.len(),
        p.tolerance_pct,
        cell(&p.status)
    );
    let _ = writeln!(
        out,
        "ncu: {} on {}. Collected with `{}`; printed with `{}`. ncu µs/call is the median over \
         the profiled calls of the call's kernels summed (a decode call is `sdpa_decode` + \
         `sdpa_decode_merge`); bench p50 is a hot-mode run without the profiler; kernel \
         columns are medians over that kernel's launches.\n",
        cell(p.ncu_version.as_deref().unwrap_or("?")),
        cell(p.device.as_deref().unwrap_or("?")),
        cell(p.collect_command.as_deref().unwrap_or("?")),
        cell(p.import_command.as_deref().unwrap_or("?")),
    );
    out.push_str(
        "| case | precision | variant | bench p50 µs | ncu µs/call | bench/ncu | truth | kernel | \
         launches | kernel µs | SM % | DRAM % | occupancy % | regs | L2 hit % | tensor % | wgmma inst |\n",
    );
    out.push_str(
        "|---|---|---|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for (i, c) in p.cases.iter().enumerate() {
        let truth = p
            .truth
            .get(i)
            .filter(|t| t.case == c.case && t.variant == c.variant);
        case_rows(out, c, truth);
    }
    out.push('\n');
}

fn case_rows(out: &mut String, c: &CaseProfile, truth: Option<&crate::profile::truth::TruthRow>) {
    let verdict = match truth {
        Some(t) if t.flagged => format!("**FLAG** {}", t.verdict),
        Some(t) => t.verdict.clone(),
        None => "–".into(),
    };
    let lead = format!(
        "| {}/{} | {} | {} | {} | {} | {} | {} |",
        cell(&c.suite),
        cell(&c.case),
        c.precision.name(),
        cell(&c.variant),
        num(c.bench_median_us, format_value),
        num(c.call_us.filter(|_| c.is_ok()), format_value),
        num(truth.and_then(|t| t.ratio), |r| format!("{r:.2}")),
        cell(&verdict),
    );
    if c.kernels.is_empty() {
        // No kernel figures: the kernel column says why.
        let _ = writeln!(
            out,
            "{lead} {} | – | – | – | – | – | – | – | – | – |",
            cell(&c.status)
        );
        return;
    }
    for (k_i, k) in c.kernels.iter().enumerate() {
        // The case's columns once, on its first kernel's row.
        let lead = if k_i == 0 {
            lead.clone()
        } else {
            "| | | | | | | |".to_string()
        };
        let _ = writeln!(
            out,
            "{lead} {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            cell(&k.kernel),
            k.launches,
            num(k.duration_us, format_value),
            pct(k.sm_throughput_pct),
            pct(k.dram_throughput_pct),
            pct(k.achieved_occupancy_pct),
            num(k.registers_per_thread, |r| format!("{r:.0}")),
            pct(k.l2_hit_rate_pct),
            pct(k.tensor_pipe_pct),
            num(k.wgmma_instructions, |w| format!("{w:.0}")),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{truth, KernelSummary};
    use fp8_sdpa::Precision;

    fn kernel(name: &str, us: f64) -> KernelSummary {
        KernelSummary {
            kernel: name.into(),
            launches: 5,
            block: "(128, 1, 1)".into(),
            grid: "(8, 8, 32)".into(),
            duration_us: Some(us),
            sm_throughput_pct: Some(41.5),
            dram_throughput_pct: Some(86.4),
            achieved_occupancy_pct: Some(45.2),
            registers_per_thread: Some(96.0),
            l2_hit_rate_pct: None,
            tensor_pipe_pct: Some(9.5),
            wgmma_instructions: Some(0.0),
        }
    }

    #[test]
    fn decode_case_spans_two_kernel_rows_and_flags() {
        let mut p = ProfileFile::new(vec![], 10.0);
        p.cases.push(CaseProfile {
            suite: "decode".into(),
            case: "b32_sq1_skv4k_hkv8".into(),
            precision: Precision::F16,
            variant: "dec-x".into(),
            status: "ok".into(),
            bench_median_us: Some(50.0),
            calls: 5,
            call_us: Some(42.0),
            kernels: vec![
                kernel("sdpa_decode", 39.0),
                kernel("sdpa_decode_merge", 3.0),
            ],
            files: vec![],
            note: None,
        });
        p.truth = truth::check(&p.cases, p.tolerance_pct);
        let mut md = String::new();
        section(&mut md, &Optional::Present(p));
        assert!(md.contains(
            "| decode/b32_sq1_skv4k_hkv8 | f16 | dec-x | 50.0 | 42.0 | 1.19 | **FLAG** differ by +19 % | sdpa_decode | 5 | 39.0 | 41.5 | 86.4 | 45.2 | 96 | – | 9.5 | 0 |"
        ), "{md}");
        assert!(
            md.contains("| | | | | | | | sdpa_decode_merge | 5 | 3.00 |"),
            "{md}"
        );
        assert!(
            md.contains("1 where the bench median and ncu's time differ"),
            "{md}"
        );
        // every table row has the header's 17 cells
        for line in md.lines().filter(|l| l.starts_with('|')) {
            assert_eq!(line.matches('|').count() - 1, 17, "{line}");
        }
    }

    #[test]
    fn a_failed_case_says_why_in_the_kernel_column() {
        let mut p = ProfileFile::new(vec![], 10.0);
        p.cases.push(CaseProfile {
            suite: "fa".into(),
            case: "d64_s1k".into(),
            precision: Precision::Bf16,
            variant: "v".into(),
            status: "failed: ncu exited with code 9".into(),
            bench_median_us: Some(80.0),
            calls: 0,
            call_us: None,
            kernels: vec![],
            files: vec![],
            note: None,
        });
        p.truth = truth::check(&p.cases, p.tolerance_pct);
        let mut md = String::new();
        body(&mut md, &p);
        let row = md.lines().find(|l| l.starts_with("| fa/d64_s1k")).unwrap();
        assert_eq!(
            row,
            "| fa/d64_s1k | bf16 | v | 80.0 | – | – | not profiled (failed: ncu exited with code 9) | failed: ncu exited with code 9 | – | – | – | – | – | – | – | – | – |"
        );
        assert_eq!(row.matches('|').count() - 1, 17, "{row}");
    }

    #[test]
    fn not_run_and_absent() {
        let mut p = ProfileFile::new(vec![], 10.0);
        p.not_run("ncu (the Nsight Compute CLI) is not on PATH");
        let mut md = String::new();
        section(&mut md, &Optional::Present(p));
        assert!(md.contains("Not run: ncu (the Nsight Compute CLI) is not on PATH"));
        let mut none = String::new();
        section(&mut none, &Optional::Absent);
        assert!(none.is_empty());
    }
}
