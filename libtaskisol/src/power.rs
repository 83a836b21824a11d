//! Per-CPU power management that wakes or slows isolated CPUs: the PM QoS resume-latency
//! limit of each CPU device and the cpufreq governor of each policy.

use crate::error::Result;
use crate::sysroot::SysRoot;

/// The kernel path of CPU `cpu`'s PM QoS resume-latency limit. Reads `0` for "no
/// constraint" and `n/a` for a zero-latency limit (no idle state may be entered); writes
/// take a number of microseconds or `n/a`.
pub fn resume_latency_path(cpu: usize) -> String {
    format!("/sys/devices/system/cpu/cpu{cpu}/power/pm_qos_resume_latency_us")
}

/// The text to write for a resume-latency limit of `us` microseconds: the kernel reads a
/// written `0` as "no constraint", so a zero limit is spelled `n/a`.
pub fn resume_latency_text(us: u32) -> String {
    if us == 0 {
        "n/a".into()
    } else {
        us.to_string()
    }
}

/// The kernel path of CPU `cpu`'s cpufreq governor (`cpufreq/scaling_governor`).
pub fn governor_path(cpu: usize) -> String {
    format!("/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor")
}

/// The governors CPU `cpu` offers; `None` without cpufreq (virtual machines, most guests).
pub fn available_governors(root: &SysRoot, cpu: usize) -> Result<Option<Vec<String>>> {
    Ok(root
        .read_value_opt(format!(
            "/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_available_governors"
        ))?
        .map(|s| s.split_whitespace().map(str::to_string).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_latency_is_spelled_na() {
        assert_eq!(resume_latency_text(0), "n/a");
        assert_eq!(resume_latency_text(3), "3");
        assert_eq!(
            resume_latency_path(2),
            "/sys/devices/system/cpu/cpu2/power/pm_qos_resume_latency_us"
        );
    }

    #[test]
    fn governors_offered_or_none_without_cpufreq() {
        let dir = tempfile::tempdir().unwrap();
        let root = SysRoot::new(dir.path());
        assert_eq!(available_governors(&root, 2).unwrap(), None);
        let d = dir.path().join("sys/devices/system/cpu/cpu2/cpufreq");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(
            d.join("scaling_available_governors"),
            "performance powersave \n",
        )
        .unwrap();
        assert_eq!(
            available_governors(&root, 2).unwrap(),
            Some(vec!["performance".to_string(), "powersave".to_string()])
        );
        assert_eq!(
            governor_path(2),
            "/sys/devices/system/cpu/cpu2/cpufreq/scaling_governor"
        );
    }
}
