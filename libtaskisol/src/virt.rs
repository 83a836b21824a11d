//! Whether the machine is a virtual machine, told the way systemd-detect-virt tells it: the
//! firmware's DMI strings name the hypervisor, Xen says so in `/sys/hypervisor`, and the CPU's
//! hypervisor flag (CPUID leaf 1, ECX bit 31, shown by the kernel in `/proc/cpuinfo`) says
//! that there is one. Read from files only, so a captured tree answers as its machine did.

use crate::sysroot::SysRoot;

/// A virtual machine: its hypervisor and what said so.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Virt {
    /// systemd-detect-virt's name for it (`kvm`, `qemu`, `vmware`, `microsoft`, `oracle`,
    /// `xen`, `amazon`, `google`, `bochs`, `parallels`, `bhyve`, `apple`), or `vm` when only
    /// the CPU's flag says there is one.
    pub hypervisor: String,
    /// What said so: `DMI sys_vendor "QEMU"`, `the CPU's hypervisor flag`.
    pub evidence: String,
}

impl std::fmt::Display for Virt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}, by {}", self.hypervisor, self.evidence)
    }
}

/// DMI strings of hypervisors, by prefix, as systemd's table has them.
const DMI_VENDORS: &[(&str, &str)] = &[
    ("KVM", "kvm"),
    ("OpenStack", "kvm"),
    ("KubeVirt", "kvm"),
    ("Amazon EC2", "amazon"),
    ("QEMU", "qemu"),
    ("VMware", "vmware"),
    ("VMW", "vmware"),
    ("innotek GmbH", "oracle"),
    ("VirtualBox", "oracle"),
    ("Oracle Corporation", "oracle"),
    ("Xen", "xen"),
    ("Bochs", "bochs"),
    ("Parallels", "parallels"),
    ("BHYVE", "bhyve"),
    ("Hyper-V", "microsoft"),
    ("Apple Virtualization", "apple"),
    ("Google Compute Engine", "google"),
];

/// The DMI files read, in systemd's order.
const DMI_FILES: &[&str] = &["product_name", "sys_vendor", "board_vendor", "bios_vendor"];

/// The machine's hypervisor, `None` on bare metal (or a machine that hides it).
pub fn detect(root: &SysRoot) -> Option<Virt> {
    let dmi = |f: &str| {
        root.read_value_opt(format!("/sys/class/dmi/id/{f}"))
            .ok()
            .flatten()
            .map(|v| v.trim().to_string())
    };
    let flag = cpu_flag(root);
    for f in DMI_FILES {
        let Some(v) = dmi(f) else { continue };
        // EC2's bare-metal instances say Amazon EC2 too; their product name ends in .metal.
        if v.starts_with("Amazon EC2") && dmi("product_name").is_some_and(|p| p.ends_with(".metal"))
        {
            continue;
        }
        if v == "Microsoft Corporation" && dmi("product_name").as_deref() == Some("Virtual Machine")
        {
            return Some(Virt {
                hypervisor: "microsoft".into(),
                evidence: "DMI \"Microsoft Corporation\" \"Virtual Machine\"".into(),
            });
        }
        if let Some((_, name)) = DMI_VENDORS.iter().find(|(p, _)| v.starts_with(p)) {
            return Some(Virt {
                hypervisor: (*name).into(),
                evidence: format!("DMI {f} {v:?}"),
            });
        }
    }
    // A Xen guest (dom0 is the host: its capabilities say control_d).
    if root
        .read_value_opt("/sys/hypervisor/type")
        .ok()
        .flatten()
        .is_some_and(|t| t.trim() == "xen")
        && !root
            .read_value_opt("/proc/xen/capabilities")
            .ok()
            .flatten()
            .is_some_and(|c| c.contains("control_d"))
    {
        return Some(Virt {
            hypervisor: "xen".into(),
            evidence: "/sys/hypervisor/type".into(),
        });
    }
    flag.then(|| Virt {
        hypervisor: "vm".into(),
        evidence: "the CPU's hypervisor flag".into(),
    })
}

/// Whether the first CPU of /proc/cpuinfo has the `hypervisor` flag.
fn cpu_flag(root: &SysRoot) -> bool {
    root.read_to_string("/proc/cpuinfo").is_ok_and(|t| {
        t.lines()
            .find(|l| l.starts_with("flags"))
            .and_then(|l| l.split_once(':'))
            .is_some_and(|(_, f)| f.split_whitespace().any(|w| w == "hypervisor"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(files: &[(&str, &str)]) -> (tempfile::TempDir, SysRoot) {
        let d = tempfile::tempdir().unwrap();
        for (p, v) in files {
            let p = d.path().join(p.trim_start_matches('/'));
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, v).unwrap();
        }
        let r = SysRoot::new(d.path());
        (d, r)
    }

    const FLAGS_VM: &str = "processor\t: 0\nflags\t\t: fpu vme sse2 hypervisor lahf_lm\n";
    const FLAGS_METAL: &str = "processor\t: 0\nflags\t\t: fpu vme sse2 lahf_lm\n";

    #[test]
    fn the_hypervisor_is_named_by_dmi_and_a_bare_flag_says_vm() {
        let (_d, r) = root(&[
            ("/sys/class/dmi/id/sys_vendor", "QEMU\n"),
            (
                "/sys/class/dmi/id/product_name",
                "Standard PC (i440FX + PIIX, 1996)\n",
            ),
            ("/proc/cpuinfo", FLAGS_VM),
        ]);
        assert_eq!(
            detect(&r),
            Some(Virt {
                hypervisor: "qemu".into(),
                evidence: "DMI sys_vendor \"QEMU\"".into()
            })
        );
        let (_d, r) = root(&[
            ("/sys/class/dmi/id/sys_vendor", "Microsoft Corporation\n"),
            ("/sys/class/dmi/id/product_name", "Virtual Machine\n"),
        ]);
        assert_eq!(detect(&r).unwrap().hypervisor, "microsoft");
        // EC2's virtual instances are Amazon's VMs (only .metal is not).
        let (_d, r) = root(&[
            ("/sys/class/dmi/id/sys_vendor", "Amazon EC2\n"),
            ("/sys/class/dmi/id/product_name", "t3.micro\n"),
        ]);
        assert_eq!(detect(&r).unwrap().hypervisor, "amazon");
        let (_d, r) = root(&[("/proc/cpuinfo", FLAGS_VM)]);
        assert_eq!(
            detect(&r).unwrap().to_string(),
            "vm, by the CPU's hypervisor flag"
        );
        let (_d, r) = root(&[("/sys/hypervisor/type", "xen\n")]);
        assert_eq!(detect(&r).unwrap().hypervisor, "xen");
    }

    #[test]
    fn bare_metal_is_no_vm() {
        let (_d, r) = root(&[
            ("/sys/class/dmi/id/sys_vendor", "Dell Inc.\n"),
            ("/sys/class/dmi/id/product_name", "PowerEdge R650\n"),
            ("/proc/cpuinfo", FLAGS_METAL),
        ]);
        assert_eq!(detect(&r), None);
        // EC2's metal instances, and Xen's dom0.
        let (_d, r) = root(&[
            ("/sys/class/dmi/id/sys_vendor", "Amazon EC2\n"),
            ("/sys/class/dmi/id/product_name", "c5.metal\n"),
            ("/proc/cpuinfo", FLAGS_METAL),
        ]);
        assert_eq!(detect(&r), None);
        let (_d, r) = root(&[
            ("/sys/hypervisor/type", "xen\n"),
            ("/proc/xen/capabilities", "control_d\n"),
        ]);
        assert_eq!(detect(&r), None);
        // Microsoft's own hardware, and a "Virtual Machine" of another vendor's name.
        let (_d, r) = root(&[
            ("/sys/class/dmi/id/sys_vendor", "Microsoft Corporation\n"),
            ("/sys/class/dmi/id/product_name", "Surface Laptop 5\n"),
        ]);
        assert_eq!(detect(&r), None);
        let (_d, r) = root(&[
            ("/sys/class/dmi/id/sys_vendor", "ACME\n"),
            ("/sys/class/dmi/id/product_name", "Virtual Machine\n"),
        ]);
        assert_eq!(detect(&r), None);
        let (_d, r) = root(&[]);
        assert_eq!(detect(&r), None);
    }
}
