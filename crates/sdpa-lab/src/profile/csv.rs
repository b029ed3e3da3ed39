//! The CSV that `ncu --csv --page raw` prints (see [`super::ncu`] for how it is made): parsed
//! into launches, summarized per kernel, grouped into calls.

use super::ncu::{DURATION, GMMA, METRICS};
use super::KernelSummary;
use crate::bench::stats::percentile_sorted;
use std::collections::BTreeMap;

/// One profiled kernel launch: a data row of the raw CSV.
#[derive(Debug, Clone, PartialEq)]
pub struct Launch {
    /// ncu's result ID (launch order among the profiled launches).
    pub id: u64,
    /// Kernel entry name (any parameter list ncu appends is cut off).
    pub kernel: String,
    /// Block size as printed.
    pub block: String,
    /// Grid size as printed.
    pub grid: String,
    /// Metric values by metric name; times in µs whatever unit ncu printed, others in ncu's
    /// unit; `None` for "n/a" and empty cells.
    pub metrics: BTreeMap<String, Option<f64>>,
}

impl Launch {
    /// A metric's value, when present and numeric.
    pub fn get(&self, metric: &str) -> Option<f64> {
        self.metrics.get(metric).copied().flatten()
    }
}

/// A metric cell as a number: ncu writes thousands separators ("1,234.5") and "n/a".
pub fn number(cell: &str) -> Option<f64> {
    let s = cell.trim();
    if s.is_empty() || s.eq_ignore_ascii_case("n/a") {
        return None;
    }
    s.replace(',', "")
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
}

/// Microseconds per unit, for ncu's time units.
fn us_per(unit: &str) -> Option<f64> {
    match unit.trim() {
        "nsecond" | "ns" => Some(1e-3),
        "usecond" | "us" => Some(1.0),
        "msecond" | "ms" => Some(1e3),
        "second" | "s" => Some(1e6),
        _ => None,
    }
}

/// Parses `ncu --csv --page raw` output: a header row of column names (`"ID"`, `"Process ID"`,
/// …, `"Kernel Name"`, …, then metric names), a row of units (empty under the non-metric
/// columns), then one row per profiled launch, every field quoted. Lines starting with `==`
/// (ncu's messages) and anything before the header (a child's output) are skipped; a repeated
/// header or units row is tolerated. Columns whose name has no `__` are not metrics.
pub fn parse_raw_csv(text: &str) -> Result<Vec<Launch>, String> {
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("=="))
        .collect();
    let start = lines
        .iter()
        .position(|l| l.trim_start().starts_with("\"ID\","))
        .ok_or("no CSV header (a row starting \"ID\",) in ncu's output")?;
    let body = lines[start..].join("\n");
    let mut reader = ::csv::ReaderBuilder::new()
        .has_headers(true)
        .from_reader(body.as_bytes());
    let header: Vec<String> = reader
        .headers()
        .map_err(|e| format!("ncu CSV header: {e}"))?
        .iter()
        .map(str::to_string)
        .collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| h == name)
            .ok_or_else(|| format!("ncu CSV has no \"{name}\" column"))
    };
    let (id_col, name_col) = (col("ID")?, col("Kernel Name")?);
    let block_col = header.iter().position(|h| h == "Block Size");
    let grid_col = header.iter().position(|h| h == "Grid Size");
    let metric_cols: Vec<usize> = (0..header.len())
        .filter(|&i| header[i].contains("__"))
        .collect();
    let mut units = vec![String::new(); header.len()];
    let mut out = Vec::new();
    for (n, rec) in reader.records().enumerate() {
        let rec = rec.map_err(|e| format!("ncu CSV row {}: {e}", n + 2))?;
        let field = |i: usize| rec.get(i).unwrap_or("").trim();
        match field(id_col) {
            "" => {
                units = (0..header.len()).map(|i| field(i).to_string()).collect();
                continue;
            }
            "ID" => continue,
            _ => {}
        }
        let id = number(field(id_col))
            .filter(|v| *v >= 0.0 && v.fract() == 0.0)
            .ok_or_else(|| {
                format!(
                    "ncu CSV row {}: ID {:?} is not a number",
                    n + 2,
                    field(id_col)
                )
            })? as u64;
        let kernel = field(name_col);
        let kernel = kernel
            .split('(')
            .next()
            .unwrap_or(kernel)
            .trim()
            .to_string();
        let metrics = metric_cols
            .iter()
            .map(|&i| {
                let v = number(field(i)).map(|v| us_per(&units[i]).map_or(v, |k| v * k));
                (header[i].clone(), v)
            })
            .collect();
        out.push(Launch {
            id,
            kernel,
            block: block_col.map(|i| field(i).to_string()).unwrap_or_default(),
            grid: grid_col.map(|i| field(i).to_string()).unwrap_or_default(),
            metrics,
        });
    }
    out.sort_by_key(|l| l.id);
    Ok(out)
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    percentile_sorted(&v, 0.5)
}

/// Per kernel, in order of first launch: medians over its launches.
pub fn summarize(launches: &[Launch]) -> Vec<KernelSummary> {
    let mut names: Vec<&str> = Vec::new();
    for l in launches {
        if !names.contains(&l.kernel.as_str()) {
            names.push(&l.kernel);
        }
    }
    names
        .into_iter()
        .map(|name| {
            let mine: Vec<&Launch> = launches.iter().filter(|l| l.kernel == name).collect();
            let m = |metric: &str| median(mine.iter().filter_map(|l| l.get(metric)).collect());
            KernelSummary {
                kernel: name.to_string(),
                launches: mine.len(),
                block: mine[0].block.clone(),
                grid: mine[0].grid.clone(),
                duration_us: m(DURATION),
                sm_throughput_pct: m(METRICS[1]),
                dram_throughput_pct: m(METRICS[2]),
                achieved_occupancy_pct: m(METRICS[3]),
                registers_per_thread: m(METRICS[4]),
                l2_hit_rate_pct: m(METRICS[5]),
                tensor_pipe_pct: m(METRICS[6]),
                wgmma_instructions: m(GMMA),
            }
        })
        .collect()
}

/// Groups launches (in launch order) into calls: every launch of a main kernel starts a call
/// and a `…_merge` launch joins the call before it, so a decode call is `sdpa_decode` +
/// `sdpa_decode_merge` and a prefill call one launch. Calls the profiled window cut (a merge
/// whose main launch was skipped, a main launch whose merge was not profiled) are dropped.
pub fn calls(launches: &[Launch]) -> Vec<Vec<&Launch>> {
    let mut out: Vec<Vec<&Launch>> = Vec::new();
    for l in launches {
        if !l.kernel.ends_with("_merge") {
            out.push(vec![l]);
        } else if let Some(c) = out.last_mut() {
            c.push(l);
        }
    }
    let full = out.iter().map(Vec::len).max().unwrap_or(0);
    out.retain(|c| c.len() == full);
    out
}

/// The median over complete calls of the call's summed kernel durations, µs, with the number
/// of calls; `None` without a call whose every launch has a duration.
pub fn call_duration_us(launches: &[Launch]) -> (usize, Option<f64>) {
    let sums: Vec<f64> = calls(launches)
        .iter()
        .filter_map(|c| c.iter().map(|l| l.get(DURATION)).sum::<Option<f64>>())
        .collect();
    (sums.len(), median(sums))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fixtures, compiled in: the GPU machine runs test binaries without the source tree.
    const H100_PREFILL: &str = include_str!("../../tests/fixtures/ncu/h100_hopper_prefill.csv");
    const H100_DECODE: &str = include_str!("../../tests/fixtures/ncu/h100_decode_collect.log");

    #[test]
    fn numbers_with_separators_and_na() {
        assert_eq!(number("1,234.5"), Some(1234.5));
        assert_eq!(number(" 12,345,678 "), Some(12345678.0));
        assert_eq!(number("0.5"), Some(0.5));
        assert_eq!(number("n/a"), None);
        assert_eq!(number("N/A"), None);
        assert_eq!(number(""), None);
        assert_eq!(number("(384, 1, 1)"), None);
    }

    #[test]
    fn prefill_fixture_parses_into_launches() {
        // Captured on the H100: `profile`'s import of 10 launches of the
        // persistent D128 tile at fa d128_s4k, f16, in base units (ns).
        let l = parse_raw_csv(H100_PREFILL).unwrap();
        assert_eq!(l.len(), 10);
        assert!(l.iter().all(|x| x.kernel == "sdpa_hopper"));
        assert_eq!(l[0].block, "(384, 1, 1)");
        assert_eq!(l[0].grid, "(132, 1, 1)");
        // nanoseconds with separators → µs
        assert_eq!(l[0].get(DURATION), Some(858.144));
        assert_eq!(l[0].get("launch__registers_per_thread"), Some(168.0));
        assert_eq!(l[0].get(GMMA), Some(8_388_608.0));
        assert_eq!(l[0].get("lts__t_sector_hit_rate.pct"), Some(88.82));
        let k = summarize(&l);
        assert_eq!(k.len(), 1);
        assert_eq!(k[0].launches, 10);
        let d = k[0].duration_us.unwrap();
        assert!((d - 858.752).abs() < 0.01, "{d}");
        assert_eq!(k[0].registers_per_thread, Some(168.0));
        assert!(k[0].l2_hit_rate_pct.is_some());
        let (n, call) = call_duration_us(&l);
        assert_eq!(n, 10);
        assert_eq!(call, k[0].duration_us);
    }

    #[test]
    fn decode_log_with_prof_lines_sums_the_two_kernels_of_a_call() {
        // Captured on the H100: `ncu --csv --page raw` on stdout, after
        // ncu's ==PROF== lines and the bench's own table, 4 launches past a skip of 12: a
        // merge cut from its call, one whole call, a decode without its merge.
        let l = parse_raw_csv(H100_DECODE).unwrap();
        assert_eq!(l.len(), 4);
        let k = summarize(&l);
        let mut names: Vec<&str> = k.iter().map(|k| k.kernel.as_str()).collect();
        names.sort();
        assert_eq!(names, ["sdpa_decode", "sdpa_decode_merge"]);
        // mma.sync kernels: ncu counts no wgmma (0, not n/a)
        assert!(k.iter().all(|k| k.wgmma_instructions == Some(0.0)));
        // units in this capture: ns with separators (123,680 ns)
        let (n, call) = call_duration_us(&l);
        assert_eq!(n, 1);
        assert!((call.unwrap() - (123.68 + 5.952)).abs() < 0.01, "{call:?}");
    }

    #[test]
    fn calls_drop_a_window_that_cuts_a_call() {
        let mk = |id, k: &str, d| Launch {
            id,
            kernel: k.into(),
            block: String::new(),
            grid: String::new(),
            metrics: [(DURATION.to_string(), Some(d))].into_iter().collect(),
        };
        let l = vec![
            mk(0, "sdpa_decode_merge", 1.0),
            mk(1, "sdpa_decode", 10.0),
            mk(2, "sdpa_decode_merge", 2.0),
            mk(3, "sdpa_decode", 12.0),
            mk(4, "sdpa_decode_merge", 2.0),
            mk(5, "sdpa_decode", 11.0),
        ];
        // the leading merge and the trailing decode without its merge are cut-off calls
        let c = calls(&l);
        assert_eq!(c.len(), 2);
        assert_eq!(call_duration_us(&l), (2, Some(13.0)));
    }

    #[test]
    fn no_header_is_an_error_not_an_empty_profile() {
        let e = parse_raw_csv("==PROF== Connected\n==ERROR== something\n").unwrap_err();
        assert!(e.contains("no CSV header"), "{e}");
    }
}
