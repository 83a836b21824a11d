//! A state file that cannot be read, salvaged (`isold restore --salvage`, the package's
//! removal): the file writes one entry a line, so every line that is a whole entry is kept
//! in a new state file, and the file itself is set aside for the administrator. What could
//! not be read is counted: those originals are lost, and said to be.

use std::path::{Path, PathBuf};

use super::state::{Entry, State};
use crate::error::{Error, Result};

/// What [`salvage`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Salvaged {
    /// Entries kept.
    pub kept: usize,
    /// Lines that looked like entries and could not be read.
    pub lost: usize,
    /// Where the unreadable file now is.
    pub aside: PathBuf,
}

/// Salvage the state file at `path` when it cannot be read as a whole: `Ok(None)` when it
/// reads (or does not exist), and nothing changes. Otherwise the entries on lines of their
/// own that read and pass [`Entry::check`] go into a new state file at `path` (its head, the
/// boot id, isolated CPUs and configuration, kept where they read), and the old file is
/// renamed `<path>.corrupt` (an earlier one replaced).
pub fn salvage(path: &Path) -> Result<Option<Salvaged>> {
    let text = match std::fs::read(path) {
        Ok(b) => String::from_utf8_lossy(&b).into_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(Error::Read {
                path: path.into(),
                source,
            })
        }
    };
    if State::load(path).is_ok() {
        return Ok(None);
    }
    let head = |key: &str| {
        text.lines().find_map(|l| {
            let v = l.trim().strip_prefix(&format!("\"{key}\":"))?;
            serde_json::from_str::<String>(v.trim().trim_end_matches(',')).ok()
        })
    };
    let mut st = State::new(
        head("boot_id").unwrap_or_default(),
        head("isolated").unwrap_or_default(),
        head("config").unwrap_or_default(),
    );
    let (mut kept, mut lost) = (0, 0);
    for line in text.lines() {
        let l = line.trim().trim_end_matches(',');
        if !l.starts_with("{\"id\"") {
            continue;
        }
        match serde_json::from_str::<Entry>(l)
            .ok()
            .filter(|e| e.check().is_ok())
        {
            Some(e) => {
                if st.record(e) {
                    kept += 1;
                }
            }
            None => lost += 1,
        }
    }
    let aside = PathBuf::from(format!("{}.corrupt", path.display()));
    std::fs::rename(path, &aside).map_err(|source| Error::Write {
        path: aside.clone(),
        data: "(the unreadable state file, set aside)".into(),
        source,
    })?;
    st.save(path)?;
    Ok(Some(Salvaged { kept, lost, aside }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A state file cut and garbled in the middle: the entries on whole lines before and after
    /// are kept, the garbled ones counted, the file set aside; a good file is left alone.
    #[test]
    fn whole_entry_lines_of_a_broken_state_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let entry = |n: u32, v: &str| {
            format!(
                r#"{{"id":"sysctl:vm.test{n}","item":"sysctl","label":"sysctl vm.test{n}","original":{{"kind":"attr","path":"/proc/sys/vm/test{n}","content":"{v}\n","restore":"{v}"}}}}"#
            )
        };
        let good = format!(
            "{{\n  \"version\": 1,\n  \"boot_id\": \"b1\",\n  \"isolated\": \"2-3\",\n  \"config\": \"/etc/isold/isold.toml\",\n  \"entries\": [\n    {},\n    {}\n  ]\n}}\n",
            entry(1, "60"),
            entry(2, "1")
        );
        std::fs::write(&path, &good).unwrap();
        assert_eq!(salvage(&path).unwrap(), None);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), good);
        let broken = good
            .replace(
                &entry(2, "1"),
                &format!("{},\n    {{\"id\":\"sysctl:vm.x\", garbage", entry(2, "1")),
            )
            .replace("  ]\n}\n", "");
        std::fs::write(&path, &broken).unwrap();
        assert!(State::load(&path).is_err());
        let s = salvage(&path).unwrap().unwrap();
        assert_eq!((s.kept, s.lost), (2, 1));
        assert_eq!(std::fs::read_to_string(&s.aside).unwrap(), broken);
        let st = State::load(&path).unwrap().unwrap();
        assert_eq!(st.entries().len(), 2);
        assert_eq!((st.boot_id.as_str(), st.isolated.as_str()), ("b1", "2-3"));
        assert_eq!(st.entries()[0].id, "sysctl:vm.test1");
    }
}
