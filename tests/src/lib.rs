//! Test-only support for taskisol: the ptrace-based task-isolation emulator, test workers
//! and the QEMU harness. Nothing here ships.
pub mod abi_cases;
pub mod qemu;
pub mod scale;

/// The nearest-rank percentile `p` (0 < p <= 1: 0.5 the median, 1.0 the maximum) of `v`,
/// which it sorts; NaN when empty. The figures of the measuring programs (isol-reaction,
/// isol-drift).
pub fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        f64::NAN
    } else {
        v[((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1]
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn nearest_rank_percentiles() {
        let mut v: Vec<f64> = (1..=200).rev().map(f64::from).collect();
        assert_eq!(super::percentile(&mut v, 0.5), 100.0);
        assert_eq!(super::percentile(&mut v, 0.99), 198.0);
        assert_eq!(super::percentile(&mut v, 1.0), 200.0);
        assert!(super::percentile(&mut [], 0.5).is_nan());
    }
}
