//! Kernel modules for the guest: find them in an unpacked Debian kernel package, order them
//! by dependency and decompress them on the host.
//!
//! Debian's linux-image packages ship no modules.dep (depmod runs in the postinst), so the
//! dependency list is read where depmod reads it: the `depends=` entry of each module's
//! `.modinfo` ELF section.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::HarnessError;

/// A module ready to be copied into the initramfs: its name and uncompressed bytes.
#[derive(Debug)]
pub struct Module {
    pub name: String,
    pub image: Vec<u8>,
}

/// Module names are compared with '-' and '_' folded, as the kernel does.
fn normalize(name: &str) -> String {
    name.replace('-', "_")
}

fn module_name(path: &Path) -> Option<String> {
    let file = path.file_name()?.to_str()?;
    let stem = file
        .strip_suffix(".ko.xz")
        .or_else(|| file.strip_suffix(".ko"))?;
    Some(normalize(stem))
}

fn walk(dir: &Path, index: &mut BTreeMap<String, PathBuf>) -> std::io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            walk(&path, index)?;
        } else if let Some(name) = module_name(&path) {
            index.insert(name, path);
        }
    }
    Ok(())
}

/// Names of built-in modules (modules.builtin lists them as kernel/.../name.ko).
fn builtins(moddir: &Path) -> BTreeSet<String> {
    fs::read_to_string(moddir.join("modules.builtin"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| module_name(Path::new(l)))
        .collect()
}

fn read_module(path: &Path) -> Result<Vec<u8>, HarnessError> {
    if path.extension().is_some_and(|e| e == "xz") {
        // The guest's busybox insmod passes the file to init_module(), which wants an ELF
        // image; 6.12's in-kernel decompression only works through finit_module().
        let out = Command::new("xz")
            .arg("-dc")
            .arg(path)
            .output()
            .map_err(|e| {
                HarnessError::setup(
                    format!("cannot run xz to unpack {}: {e}", path.display()),
                    "apt-get install -y xz-utils (scripts/setup-qemu does it)",
                )
            })?;
        if !out.status.success() {
            return Err(HarnessError::Io(format!(
                "xz -dc {} failed: {}",
                path.display(),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(out.stdout)
    } else {
        fs::read(path).map_err(|e| HarnessError::Io(format!("read {}: {e}", path.display())))
    }
}

/// The `depends=` list of a module's `.modinfo` section.
pub fn modinfo_depends(image: &[u8]) -> Option<Vec<String>> {
    let modinfo = elf_section(image, ".modinfo")?;
    for entry in modinfo.split(|b| *b == 0) {
        if let Some(v) = entry.strip_prefix(b"depends=") {
            let v = std::str::from_utf8(v).ok()?;
            return Some(
                v.split(',')
                    .filter(|s| !s.is_empty())
                    .map(normalize)
                    .collect(),
            );
        }
    }
    Some(Vec::new())
}

/// The bytes of a named section of a little-endian ELF64 file (the only kind an amd64
/// kernel loads).
fn elf_section<'a>(image: &'a [u8], wanted: &str) -> Option<&'a [u8]> {
    let u16_at = |o: usize| Some(u16::from_le_bytes(image.get(o..o + 2)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_le_bytes(image.get(o..o + 8)?.try_into().ok()?));
    if image.get(..5)? != b"\x7fELF\x02" {
        return None;
    }
    let shoff = usize::try_from(u64_at(0x28)?).ok()?;
    let shentsize = usize::from(u16_at(0x3a)?);
    let shnum = usize::from(u16_at(0x3c)?);
    let shstrndx = usize::from(u16_at(0x3e)?);
    let section = |i: usize| -> Option<(u32, usize, usize)> {
        let h = shoff + i * shentsize;
        let name = u32::from_le_bytes(image.get(h..h + 4)?.try_into().ok()?);
        let off = usize::try_from(u64_at(h + 0x18)?).ok()?;
        let size = usize::try_from(u64_at(h + 0x20)?).ok()?;
        Some((name, off, size))
    };
    let (_, stroff, strsize) = section(shstrndx)?;
    let strtab = image.get(stroff..stroff + strsize)?;
    for i in 0..shnum {
        let (name, off, size) = section(i)?;
        let name = strtab.get(name as usize..)?;
        let end = name.iter().position(|b| *b == 0)?;
        if &name[..end] == wanted.as_bytes() {
            return image.get(off..off + size);
        }
    }
    None
}

/// The modules needed to load `wanted` (with their dependencies first), skipping those the
/// kernel has built in. `moddir` is lib/modules/<release> of the unpacked package.
pub fn resolve(moddir: &Path, wanted: &[&str]) -> Result<Vec<Module>, HarnessError> {
    let mut index = BTreeMap::new();
    // A kernel built without modules (the project's test kernel) has no kernel/ directory:
    // everything it has is built in.
    let kernel_dir = moddir.join("kernel");
    if kernel_dir.is_dir() {
        walk(&kernel_dir, &mut index)
            .map_err(|e| HarnessError::Io(format!("list modules in {}: {e}", moddir.display())))?;
    }
    let builtin = builtins(moddir);
    let mut order = Vec::new();
    let mut seen = BTreeSet::new();
    for name in wanted {
        visit(&normalize(name), &index, &builtin, &mut seen, &mut order, 0)?;
    }
    Ok(order)
}

fn visit(
    name: &str,
    index: &BTreeMap<String, PathBuf>,
    builtin: &BTreeSet<String>,
    seen: &mut BTreeSet<String>,
    order: &mut Vec<Module>,
    depth: usize,
) -> Result<(), HarnessError> {
    if depth > 32 {
        return Err(HarnessError::Io(format!(
            "module dependency loop at {name}"
        )));
    }
    if builtin.contains(name) || !seen.insert(name.to_string()) {
        return Ok(());
    }
    let path = index.get(name).ok_or_else(|| {
        HarnessError::Io(format!("module {name} is neither built in nor in the package (scripts/setup-qemu keeps only virtio, net, block and lib modules)"))
    })?;
    let image = read_module(path)?;
    let deps = modinfo_depends(&image)
        .ok_or_else(|| HarnessError::Io(format!("{} has no readable .modinfo", path.display())))?;
    for dep in deps {
        visit(&dep, index, builtin, seen, order, depth + 1)?;
    }
    order.push(Module {
        name: name.to_string(),
        image,
    });
    Ok(())
}
