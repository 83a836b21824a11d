//! Both state files as one: what apply, verify and restore work on.

use std::path::Path;

use super::entry::Entry;
use super::file::{boot_id, State, StateFiles};
use super::journal::keep_set_aside;
use crate::error::{Error, Result};
use crate::sysroot::SysRoot;

/// Both state files, loaded as one [`State`], and written back split: what a command works
/// on. The runtime file is this boot's or none (one of an earlier boot keeps only its files'
/// originals, which move to the persistent file); the persistent file holds only files.
/// Entries that fail [`Entry::check`] are set aside in `rejected` and dropped from both
/// files at the next write.
#[derive(Debug)]
pub(crate) struct Ledger {
    files: StateFiles,
    /// Every usable entry, the runtime file's first.
    pub state: State,
    /// The runtime and persistent parts as they are on disk (`None`: no file).
    runtime_disk: Option<State>,
    persistent_disk: Option<State>,
    /// Entries refused by [`Entry::check`], with why.
    pub rejected: Vec<(Entry, String)>,
    /// The runtime file was from an earlier boot.
    pub earlier_boot: bool,
}

impl Ledger {
    /// Load both files (`isolated` and `config` head a new runtime file).
    pub fn load(
        files: &StateFiles,
        root: &SysRoot,
        isolated: String,
        config: String,
    ) -> Result<Ledger> {
        let boot = boot_id(root)?;
        let runtime_disk = State::load(&files.runtime)?;
        let persistent_disk = State::load(&files.persistent)?;
        let mut earlier_boot = false;
        let mut state = match &runtime_disk {
            Some(s) if s.boot_id == boot => s.clone(),
            Some(s) => {
                earlier_boot = true;
                let mut fresh = State::new(boot.clone(), isolated, config);
                fresh.set_aside.clone_from(&s.set_aside);
                // Files on disk outlive the boot (state files of isold 0.1 kept them here).
                *fresh.entries_mut() = s
                    .entries()
                    .iter()
                    .filter(|e| !e.original.is_runtime())
                    .cloned()
                    .collect();
                fresh
            }
            None => State::new(boot.clone(), isolated, config),
        };
        let mut rejected = Vec::new();
        if let Some(p) = &persistent_disk {
            for e in p.entries() {
                if e.original.is_runtime() {
                    rejected.push((
                        e.clone(),
                        format!(
                            "a value of the running kernel in {}, which holds files only",
                            files.persistent.display()
                        ),
                    ));
                } else {
                    state.record(e.clone());
                }
            }
        }
        state.entries_mut().retain(|e| match e.check() {
            Ok(()) => true,
            Err(why) => {
                rejected.push((e.clone(), why));
                false
            }
        });
        Ok(Ledger {
            files: files.clone(),
            state,
            runtime_disk,
            persistent_disk,
            rejected,
            earlier_boot,
        })
    }

    /// The runtime state file (whose journal takes the appends).
    pub fn runtime_path(&self) -> &Path {
        &self.files.runtime
    }

    /// Whether neither file exists.
    pub fn is_empty_on_disk(&self) -> bool {
        self.runtime_disk.is_none() && self.persistent_disk.is_none()
    }

    /// `e`, a failed [`Ledger::persist`] before any change, said as such: which state
    /// directory could not take the originals, the file and the errno.
    pub fn not_recorded(&self, e: Error) -> Error {
        match e {
            Error::Write { path, source, .. } => {
                let dir = [&self.files.runtime, &self.files.persistent]
                    .into_iter()
                    .filter_map(|f| f.parent())
                    .find(|d| path.starts_with(d))
                    .map_or_else(|| path.clone(), Path::to_path_buf);
                Error::Record {
                    dir,
                    file: path,
                    source,
                }
            }
            other => other,
        }
    }

    /// The runtime part of `state` and its persistent part.
    fn split(&self) -> (State, State) {
        let (run, pers): (Vec<Entry>, Vec<Entry>) = self
            .state
            .entries()
            .iter()
            .cloned()
            .partition(|e| e.original.is_runtime());
        let mut r = self.state.clone();
        *r.entries_mut() = run;
        let mut p = State::new(
            self.state.boot_id.clone(),
            self.state.isolated.clone(),
            self.state.config.clone(),
        );
        *p.entries_mut() = pers;
        (r, p)
    }

    /// Write what differs from the files on disk: the persistent file whole (it changes
    /// rarely), the runtime one by appending to its journal when it only gained entries,
    /// else whole; a file left without entries is removed.
    pub fn persist(&mut self) -> Result<()> {
        let (run, pers) = self.split();
        let pers_on_disk = self.persistent_disk.as_ref().map(|d| d.entries());
        if pers_on_disk != Some(pers.entries()) {
            if pers.entries().is_empty() {
                if self.persistent_disk.is_some() {
                    State::remove(&self.files.persistent)?;
                }
                self.persistent_disk = None;
            } else {
                pers.save(&self.files.persistent)?;
                self.persistent_disk = Some(pers);
            }
        }
        // Journal lines set aside at the load leave the journal now, into the set-aside
        // file: said once (by the report of this load), kept for the administrator.
        let aside = !run.set_aside.is_empty();
        if self.runtime_disk.as_ref() == Some(&run) && !aside {
            return Ok(());
        }
        if run.entries().is_empty() && run.unchangeable.is_empty() {
            if self.runtime_disk.is_some() {
                keep_set_aside(&self.files.runtime, &run.set_aside)?;
                State::remove(&self.files.runtime)?;
            }
            self.state.set_aside.clear();
            self.runtime_disk = None;
            return Ok(());
        }
        let added = match &self.runtime_disk {
            Some(d)
                if !aside
                    && d.version == run.version
                    && d.boot_id == run.boot_id
                    && d.isolated == run.isolated
                    && d.config == run.config
                    && d.unchangeable == run.unchangeable
                    && run.entries().starts_with(d.entries()) =>
            {
                Some(run.entries()[d.entries().len()..].to_vec())
            }
            _ => None,
        };
        match added {
            Some(added) => run.append(&self.files.runtime, &added)?,
            None => run.save(&self.files.runtime)?,
        }
        let mut run = run;
        run.set_aside.clear();
        self.state.set_aside.clear();
        self.runtime_disk = Some(run);
        Ok(())
    }
}
