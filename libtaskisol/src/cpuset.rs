//! CPU sets of any size, in the kernel's two text formats.
//!
//! * list format, as in `/sys/devices/system/cpu/online` or `taskset -c`: `0-3,8,10-11`;
//!   the kernel's stride form `0-15:2/4` (use 2 of every 4) is accepted on input.
//! * hex-mask format, as in `/proc/irq/N/smp_affinity`: comma-separated 32-bit groups, most
//!   significant first: `ff,ffffffff`.
//!
//! Unlike `libc::cpu_set_t` (1024 CPUs), a [`CpuSet`] grows as needed; the only bound is
//! [`CpuSet::MAX_CPUS`], which protects against absurd input such as `0-4000000000`.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

/// A CPU list or mask could not be parsed or does not fit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid CPU {kind} {input:?}: {reason}")]
pub struct CpuSetError {
    /// "list" or "mask".
    pub kind: &'static str,
    /// The text that was given.
    pub input: String,
    /// What is wrong with it.
    pub reason: String,
}

impl CpuSetError {
    fn list(input: &str, reason: impl Into<String>) -> Self {
        CpuSetError {
            kind: "list",
            input: input.to_string(),
            reason: reason.into(),
        }
    }
    fn mask(input: &str, reason: impl Into<String>) -> Self {
        CpuSetError {
            kind: "mask",
            input: input.to_string(),
            reason: reason.into(),
        }
    }
}

/// A set of CPU numbers.
///
/// Equality, hashing and ordering ignore capacity: `{2,3}` built from a 4-CPU mask equals
/// `{2,3}` built from a 4096-CPU mask.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct CpuSet {
    // Bit n of words[n / 64] is CPU n. Invariant: no trailing zero words, so derived
    // equality is set equality.
    words: Vec<u64>,
}

impl CpuSet {
    /// Largest number of CPUs a set can describe (CPU numbers 0..MAX_CPUS). Far above any
    /// kernel's NR_CPUS (8192 on x86 MAXSMP) while keeping a set's memory bounded (128 KiB).
    pub const MAX_CPUS: usize = 1 << 20;

    /// The longest list [`CpuSet::parse_list`] reads: every other CPU of 8,192 (the largest
    /// NR_CPUS) is under 40 KiB. With each element's cost following its range's words, a
    /// list of this length parses in a fraction of a second whatever it holds (264 ms for
    /// 4,680 strided ranges over every CPU number, release build).
    pub const MAX_LIST_BYTES: usize = 64 * 1024;

    /// The empty set.
    pub fn new() -> Self {
        CpuSet { words: Vec::new() }
    }

    /// CPUs `0..n`.
    pub fn first_n(n: usize) -> Self {
        let mut s = CpuSet::new();
        s.insert_range(0, n);
        s
    }

    fn trim(&mut self) {
        while self.words.last() == Some(&0) {
            self.words.pop();
        }
    }

    /// Add CPU `cpu`. Panics if `cpu >= MAX_CPUS` (parsers check this and return errors).
    pub fn insert(&mut self, cpu: usize) {
        assert!(cpu < Self::MAX_CPUS, "CPU {cpu} beyond CpuSet::MAX_CPUS");
        let w = cpu / 64;
        if self.words.len() <= w {
            self.words.resize(w + 1, 0);
        }
        self.words[w] |= 1 << (cpu % 64);
    }

    /// Add CPUs `start..end`.
    pub fn insert_range(&mut self, start: usize, end: usize) {
        if start >= end {
            return;
        }
        self.insert(end - 1);
        // A word at a time: "0-447" is seven stores, not 448.
        let mut cpu = start;
        while cpu < end {
            let w = cpu / 64;
            let lo = cpu % 64;
            let hi = (end - w * 64).min(64);
            let mask = if hi - lo == 64 {
                u64::MAX
            } else {
                ((1u64 << (hi - lo)) - 1) << lo
            };
            self.words[w] |= mask;
            cpu = (w + 1) * 64;
        }
    }

    /// The runs of consecutive CPUs, as (first, last), ascending; a word at a time.
    pub fn runs(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        let mut from = 0usize;
        std::iter::from_fn(move || {
            let first = self.next_where(from, true)?;
            let end = self
                .next_where(first, false)
                .unwrap_or(self.words.len() * 64);
            from = end;
            Some((first, end - 1))
        })
    }

    /// The first CPU from `from` on that is in the set (`member`) or not in it.
    fn next_where(&self, from: usize, member: bool) -> Option<usize> {
        let mut w = from / 64;
        let mut skip = from % 64;
        while w < self.words.len() {
            let word = if member {
                self.words[w]
            } else {
                !self.words[w]
            };
            let bits = word & (u64::MAX << skip);
            if bits != 0 {
                return Some(w * 64 + bits.trailing_zeros() as usize);
            }
            w += 1;
            skip = 0;
        }
        None
    }

    /// Remove CPU `cpu`.
    pub fn remove(&mut self, cpu: usize) {
        let w = cpu / 64;
        if w < self.words.len() {
            self.words[w] &= !(1 << (cpu % 64));
            self.trim();
        }
    }

    /// Whether CPU `cpu` is in the set.
    pub fn contains(&self, cpu: usize) -> bool {
        self.words
            .get(cpu / 64)
            .is_some_and(|w| w & (1 << (cpu % 64)) != 0)
    }

    /// Number of CPUs in the set.
    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// True when no CPU is in the set.
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// Lowest CPU.
    pub fn first(&self) -> Option<usize> {
        self.iter().next()
    }

    /// Highest CPU.
    pub fn last(&self) -> Option<usize> {
        let w = self.words.len().checked_sub(1)?;
        Some(w * 64 + 63 - self.words[w].leading_zeros() as usize)
    }

    /// CPUs in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.words.iter().enumerate().flat_map(|(i, &w)| {
            let mut bits = w;
            std::iter::from_fn(move || {
                if bits == 0 {
                    return None;
                }
                let b = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                Some(i * 64 + b)
            })
        })
    }

    fn zip_with(&self, other: &CpuSet, f: impl Fn(u64, u64) -> u64) -> CpuSet {
        let n = self.words.len().max(other.words.len());
        let get = |v: &Vec<u64>, i: usize| v.get(i).copied().unwrap_or(0);
        let mut out = CpuSet {
            words: (0..n)
                .map(|i| f(get(&self.words, i), get(&other.words, i)))
                .collect(),
        };
        out.trim();
        out
    }

    /// CPUs in either set.
    pub fn union(&self, other: &CpuSet) -> CpuSet {
        self.zip_with(other, |a, b| a | b)
    }

    /// CPUs in both sets.
    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        self.zip_with(other, |a, b| a & b)
    }

    /// CPUs in `self` but not in `other`.
    pub fn difference(&self, other: &CpuSet) -> CpuSet {
        self.zip_with(other, |a, b| a & !b)
    }

    /// Whether every CPU of `self` is in `other`.
    pub fn is_subset(&self, other: &CpuSet) -> bool {
        self.difference(other).is_empty()
    }

    /// Whether the sets share no CPU.
    pub fn is_disjoint(&self, other: &CpuSet) -> bool {
        self.intersection(other).is_empty()
    }

    /// Parse the list format (`0-3,8,10-11`, `0-15:2/4`). Surrounding white space (the
    /// trailing newline of sysfs files) is ignored; an empty string is the empty set, as the
    /// kernel prints an empty list.
    pub fn parse_list(input: &str) -> Result<CpuSet, CpuSetError> {
        let s = input.trim();
        let mut set = CpuSet::new();
        if s.is_empty() {
            return Ok(set);
        }
        if s.len() > Self::MAX_LIST_BYTES {
            let head: String = input.chars().take(64).collect();
            return Err(CpuSetError::list(
                &head,
                format!(
                    "a list of {} bytes: longer than any kernel prints ({} at most)",
                    s.len(),
                    Self::MAX_LIST_BYTES
                ),
            ));
        }
        for part in s.split(',') {
            let part = part.trim();
            if part.is_empty() {
                return Err(CpuSetError::list(input, "empty element"));
            }
            let (range, stride) = match part.split_once(':') {
                Some((r, st)) => (r, Some(st)),
                None => (part, None),
            };
            let num = |t: &str| -> Result<usize, CpuSetError> {
                let t = t.trim();
                if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(CpuSetError::list(
                        input,
                        format!("{t:?} is not a CPU number"),
                    ));
                }
                match t.parse::<usize>() {
                    Ok(n) if n < Self::MAX_CPUS => Ok(n),
                    _ => Err(CpuSetError::list(
                        input,
                        format!(
                            "CPU {t} is beyond the largest supported CPU number {}",
                            Self::MAX_CPUS - 1
                        ),
                    )),
                }
            };
            let (lo, hi) = match range.split_once('-') {
                Some((a, b)) => (num(a)?, num(b)?),
                None => {
                    let n = num(range)?;
                    (n, n)
                }
            };
            if lo > hi {
                return Err(CpuSetError::list(
                    input,
                    format!("range {lo}-{hi} is reversed"),
                ));
            }
            let (used, group) = match stride {
                None => (1, 1),
                Some(st) => {
                    // The kernel's "used/group", or taskset's plain stride "N" (= 1/N).
                    let (u, g) = match st.split_once('/') {
                        Some((u, g)) => (num(u)?, num(g)?),
                        None => (1, num(st)?),
                    };
                    if u == 0 || g == 0 || u > g {
                        return Err(CpuSetError::list(
                            input,
                            format!("stride {u}/{g}: need 0 < used <= group"),
                        ));
                    }
                    (u, g)
                }
            };
            set.insert_strided(lo, hi, used, group);
        }
        Ok(set)
    }

    /// Add the CPUs of `lo..=hi` whose offset from `lo` modulo `group` is below `used` (the
    /// list format's `lo-hi:used/group`), a word at a time: its cost follows the range's
    /// words, not its CPUs (a 20 KB list of strided ranges once took 1.5 s CPU by CPU).
    fn insert_strided(&mut self, lo: usize, hi: usize, used: usize, group: usize) {
        if used >= group {
            self.insert_range(lo, hi + 1);
            return;
        }
        if group >= 64 {
            // At most one group starts in each word.
            let mut start = lo;
            while start <= hi {
                self.insert_range(start, (start + used).min(hi + 1));
                start += group;
            }
            return;
        }
        // A word's bits repeat with the period `group`: the word whose first CPU is at
        // `phase` in its group, for each phase.
        let table: Vec<u64> = (0..group)
            .map(|phase| {
                (0..64)
                    .filter(|b| (phase + b) % group < used)
                    .fold(0u64, |m, b| m | 1 << b)
            })
            .collect();
        if self.words.len() <= hi / 64 {
            self.words.resize(hi / 64 + 1, 0);
        }
        for w in lo / 64..=hi / 64 {
            let first = w * 64;
            // The phase of the word's first CPU, counted from `lo` (before `lo` the mask
            // below clears the bits anyway).
            let phase = (first + group * (lo / group + 1) - lo) % group;
            let mut m = table[phase];
            if first < lo {
                m &= u64::MAX << (lo - first);
            }
            if hi < first + 63 {
                m &= u64::MAX >> (63 - (hi - first));
            }
            self.words[w] |= m;
        }
        self.trim();
    }

    /// Parse the kernel's hex-mask format: comma-separated groups of up to 8 hex digits (32
    /// bits each), most significant first (`ff,ffffffff`). A single group without commas may
    /// be longer and may carry a `0x` prefix, for masks typed by hand. White space around
    /// the text is ignored.
    pub fn parse_mask(input: &str) -> Result<CpuSet, CpuSetError> {
        let s = input.trim();
        if s.is_empty() {
            return Err(CpuSetError::mask(input, "empty mask"));
        }
        let groups: Vec<&str> = if s.contains(',') {
            let g: Vec<&str> = s.split(',').collect();
            if let Some(bad) = g
                .iter()
                .find(|g| g.is_empty() || g.len() > 8 || !g.bytes().all(|b| b.is_ascii_hexdigit()))
            {
                return Err(CpuSetError::mask(
                    input,
                    format!("group {bad:?} must be 1 to 8 hex digits"),
                ));
            }
            g
        } else {
            let t = s
                .strip_prefix("0x")
                .or_else(|| s.strip_prefix("0X"))
                .unwrap_or(s);
            if t.is_empty() {
                return Err(CpuSetError::mask(input, "no hex digits"));
            }
            if let Some(c) = t.chars().find(|c| !c.is_ascii_hexdigit()) {
                return Err(CpuSetError::mask(
                    input,
                    format!("{c:?} is not a hex digit"),
                ));
            }
            // Split into 8-digit groups from the right.
            let mut v = Vec::new();
            let mut end = t.len();
            while end > 0 {
                let start = end.saturating_sub(8);
                v.push(&t[start..end]);
                end = start;
            }
            v.reverse();
            v
        };
        // Leading zero groups are allowed beyond the bound; set bits are not.
        let significant = groups
            .iter()
            .skip_while(|g| g.bytes().all(|b| b == b'0'))
            .count();
        if significant * 32 > Self::MAX_CPUS {
            return Err(CpuSetError::mask(
                input,
                format!("mask is wider than {} CPUs", Self::MAX_CPUS),
            ));
        }
        // Groups map straight onto words: group i (from the right) is half of word i/2.
        let mut words = vec![0u64; groups.len().div_ceil(2)];
        for (i, g) in groups.iter().rev().enumerate() {
            let val = u32::from_str_radix(g, 16)
                .map_err(|_| CpuSetError::mask(input, format!("{g:?} is not hexadecimal")))?;
            words[i / 2] |= u64::from(val) << ((i % 2) * 32);
        }
        let mut set = CpuSet { words };
        set.trim();
        Ok(set)
    }

    /// The list format, as the kernel prints it (`0-3,8`); empty for the empty set.
    pub fn to_list_string(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        for (lo, hi) in self.runs() {
            if !out.is_empty() {
                out.push(',');
            }
            // Writing to a String cannot fail.
            let _ = if lo == hi {
                write!(out, "{lo}")
            } else {
                write!(out, "{lo}-{hi}")
            };
        }
        out
    }

    /// The shortest list the kernel's `bitmap_parselist` reads as this set, for its
    /// command line (`isolcpus=`, `nohz_full=`, `rcu_nocbs=`, `irqaffinity=`): the plain
    /// list, or one region with the kernel's group syntax `first-last:used/group` when that
    /// is shorter (every other CPU of 448: `1-447:1/2` instead of 224 numbers). Equal lengths
    /// give the plain list.
    pub fn to_kernel_list(&self) -> String {
        let plain = self.to_list_string();
        let (Some(first), Some(last)) = (self.first(), self.last()) else {
            return plain;
        };
        // A region's pattern repeats from its first CPU: the first run is `used` long and the
        // second run starts `group` after the first CPU.
        for (used, c) in self.iter().enumerate() {
            if c != first + used {
                let group = c - first;
                let region = format!("{first}-{last}:{used}/{group}");
                return match CpuSet::parse_list(&region) {
                    Ok(r) if r == *self && region.len() < plain.len() => region,
                    _ => plain,
                };
            }
        }
        plain
    }

    /// The hex-mask format with no leading zero groups (`ff,ffffffff`); `0` for the empty set.
    pub fn to_mask_string(&self) -> String {
        // The width grows to the last CPU by itself.
        self.to_mask_string_width(1)
    }

    /// The hex-mask format exactly as the kernel prints a mask of `nbits` bits (its
    /// `nr_cpu_ids`): the first group has as many digits as the top bits need, every other
    /// group has 8 (`nbits` = 36 gives `f,ffffffff`). CPUs at or above `nbits` are printed too.
    pub fn to_mask_string_width(&self, nbits: usize) -> String {
        let nbits = nbits.max(self.last().map_or(1, |l| l + 1)).max(1);
        let ngroups = nbits.div_ceil(32);
        let group = |i: usize| -> u32 {
            let w = self.words.get(i / 2).copied().unwrap_or(0);
            (if i % 2 == 0 { w } else { w >> 32 }) as u32
        };
        use std::fmt::Write;
        let mut out = String::with_capacity(ngroups * 9);
        for i in (0..ngroups).rev() {
            // Writing to a String cannot fail.
            if i == ngroups - 1 {
                let top_bits = nbits - i * 32;
                let digits = top_bits.div_ceil(4);
                let _ = write!(out, "{:0width$x}", group(i), width = digits);
            } else {
                let _ = write!(out, ",{:08x}", group(i));
            }
        }
        out
    }

    /// The set as bytes of a kernel `unsigned long` bitmap (for `sched_setaffinity`), padded
    /// to `min_bytes` and to whole longs.
    pub fn to_kernel_bitmap(&self, min_bytes: usize) -> Vec<u8> {
        let long = std::mem::size_of::<libc::c_ulong>();
        let need = (self.words.len() * 8).max(min_bytes).div_ceil(long) * long;
        let mut out = vec![0u8; need];
        for (i, w) in self.words.iter().enumerate() {
            out[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        out
    }

    /// Build from a kernel bitmap of bytes (little-endian x86/arm64 layout).
    pub fn from_kernel_bitmap(bytes: &[u8]) -> CpuSet {
        let mut words: Vec<u64> = bytes
            .chunks(8)
            .map(|c| {
                let mut b = [0u8; 8];
                b[..c.len()].copy_from_slice(c);
                u64::from_le_bytes(b)
            })
            .collect();
        while words.last() == Some(&0) {
            words.pop();
        }
        CpuSet { words }
    }
}

impl FromStr for CpuSet {
    type Err = CpuSetError;
    /// Parses the list format.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CpuSet::parse_list(s)
    }
}

impl fmt::Display for CpuSet {
    /// The list format.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_list_string())
    }
}

impl fmt::Debug for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CpuSet({})", self.to_list_string())
    }
}

impl FromIterator<usize> for CpuSet {
    fn from_iter<I: IntoIterator<Item = usize>>(iter: I) -> Self {
        let mut s = CpuSet::new();
        for c in iter {
            s.insert(c);
        }
        s
    }
}

impl PartialOrd for CpuSet {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for CpuSet {
    /// Orders by the CPU lists, lowest CPU first (`0-1` < `0-2` < `1`).
    fn cmp(&self, other: &Self) -> Ordering {
        self.iter().cmp(other.iter())
    }
}

impl std::ops::BitOr for &CpuSet {
    type Output = CpuSet;
    fn bitor(self, rhs: &CpuSet) -> CpuSet {
        self.union(rhs)
    }
}

impl std::ops::BitAnd for &CpuSet {
    type Output = CpuSet;
    fn bitand(self, rhs: &CpuSet) -> CpuSet {
        self.intersection(rhs)
    }
}

impl std::ops::Sub for &CpuSet {
    type Output = CpuSet;
    fn sub(self, rhs: &CpuSet) -> CpuSet {
        self.difference(rhs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_list_is_the_shortest_the_kernel_reads() {
        let list = |s: &str| CpuSet::parse_list(s).unwrap();
        // Every other CPU of 448, both SMT halves of every core but the first two, hyper-
        // threads as the second half: a region with a group, or the plain list when that is
        // as short.
        assert_eq!(list("1-447:1/2").to_kernel_list(), "1-447:1/2");
        assert_eq!(list("4-447:2/4").to_kernel_list(), "4-445:2/4");
        assert_eq!(list("2-223,226-447").to_kernel_list(), "2-223,226-447");
        assert_eq!(list("1,3").to_kernel_list(), "1,3");
        assert_eq!(list("1,3,5,7").to_kernel_list(), "1,3,5,7");
        assert_eq!(list("1,3,5,7,9").to_kernel_list(), "1-9:1/2");
        assert_eq!(list("2-3").to_kernel_list(), "2-3");
        assert_eq!(list("").to_kernel_list(), "");
        // A last group cut short by the last CPU is a region still (the kernel stops at the
        // last CPU); a pattern that breaks is the plain list.
        assert_eq!(list("0-1,4-5,8").to_kernel_list(), "0-8:2/4");
        assert_eq!(list("1,3,5,7,8").to_kernel_list(), "1,3,5,7-8");
        // Whatever the set, the kernel's reading of it gives it back.
        let mut seed = 7u64;
        for _ in 0..2000 {
            let mut s = CpuSet::new();
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let (start, group, used, end) = (
                (seed >> 8) as usize % 40,
                2 + (seed >> 20) as usize % 9,
                1 + (seed >> 30) as usize % 8,
                (seed >> 40) as usize % 448,
            );
            for c in start..=end.max(start) {
                if (c - start) % group < used.min(group) {
                    s.insert(c);
                }
            }
            if seed % 3 == 0 {
                s.insert((seed >> 50) as usize % 448);
            }
            let k = s.to_kernel_list();
            assert_eq!(CpuSet::parse_list(&k).unwrap(), s, "{k}");
            assert!(k.len() <= s.to_list_string().len(), "{k}");
        }
    }
    use proptest::prelude::*;

    fn l(s: &str) -> CpuSet {
        CpuSet::parse_list(s).unwrap()
    }

    /// A width smaller than the set grows to its last CPU: nothing set is ever cut off.
    #[test]
    fn mask_width_never_cuts_a_cpu() {
        let s: CpuSet = "32".parse().unwrap();
        assert_eq!(s.to_mask_string_width(1), "1,00000000");
        assert_eq!(s.to_mask_string_width(36), "1,00000000");
        assert_eq!(s.to_mask_string_width(40), "01,00000000");
        assert_eq!(s.to_mask_string(), "1,00000000");
        assert_eq!(CpuSet::new().to_mask_string(), "0");
        // What a failed assertion shows.
        assert_eq!(format!("{s:?}"), "CpuSet(32)");
        assert_eq!(format!("{:?}", CpuSet::new()), "CpuSet()");
    }

    /// The mask format's edges: exactly MAX_CPUS bits wide, wider with leading zero groups,
    /// wider with a bit set beyond; empty groups.
    #[test]
    fn mask_edges() {
        let groups = CpuSet::MAX_CPUS / 32;
        let mask = |n: usize, first: &str| {
            let mut g = vec!["00000000"; n];
            g[0] = first;
            g.join(",")
        };
        let top = CpuSet::parse_mask(&mask(groups, "80000000")).unwrap();
        assert_eq!(top.to_string(), (CpuSet::MAX_CPUS - 1).to_string());
        let padded = CpuSet::parse_mask(&format!("0,{}", mask(groups, "80000000"))).unwrap();
        assert_eq!(
            padded, top,
            "a leading zero group beyond the bound is allowed"
        );
        let e = CpuSet::parse_mask(&mask(groups + 1, "1"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!("mask is wider than {} CPUs", CpuSet::MAX_CPUS)),
            "{}",
            &e[e.len().saturating_sub(80)..]
        );
        for bad in ["ff,,ff", ",ff", "ff,"] {
            let e = CpuSet::parse_mask(bad).unwrap_err().to_string();
            assert!(e.contains("must be 1 to 8 hex digits"), "{bad}: {e}");
        }
    }

    /// The list format's edges: strides counted from the start of the range, a stride that
    /// takes every CPU, the largest CPU number, and tokens that are not plain digits.
    #[test]
    fn list_edges() {
        let l = |t: &str| CpuSet::parse_list(t).map(|s| s.to_string());
        assert_eq!(l("1-7:1/3").unwrap(), "1,4,7");
        assert_eq!(l("0-3:2/2").unwrap(), "0-3");
        let max = CpuSet::MAX_CPUS;
        assert_eq!(l(&(max - 1).to_string()).unwrap(), (max - 1).to_string());
        let e = l(&max.to_string()).unwrap_err().to_string();
        assert!(
            e.contains("is beyond the largest supported CPU number"),
            "{e}"
        );
        for bad in ["+1", "1-", "-1", "1-+3"] {
            let e = l(bad).unwrap_err().to_string();
            assert!(e.contains("is not a CPU number"), "{bad}: {e}");
        }
    }

    #[test]
    fn list_format_matches_the_kernel() {
        assert_eq!(l("0-3,8,10-11").to_string(), "0-3,8,10-11");
        assert_eq!(l(" 3,2,1,0\n").to_string(), "0-3");
        assert_eq!(l("").to_string(), "");
        assert_eq!(l("\n").len(), 0);
        assert_eq!(l("0-15:2/4").to_string(), "0-1,4-5,8-9,12-13");
        assert_eq!(l("0-7:2").to_string(), "0,2,4,6", "taskset's stride");
        assert_eq!(l("5").iter().collect::<Vec<_>>(), vec![5]);
    }

    #[test]
    fn mask_format_matches_the_kernel() {
        let s = CpuSet::parse_mask("ff,ffffffff").unwrap();
        assert_eq!(s.to_list_string(), "0-39");
        assert_eq!(s.to_mask_string(), "ff,ffffffff");
        assert_eq!(CpuSet::parse_mask("f\n").unwrap().to_list_string(), "0-3");
        assert_eq!(CpuSet::parse_mask("0x30").unwrap().to_list_string(), "4-5");
        assert_eq!(
            CpuSet::parse_mask("00000000,00000001")
                .unwrap()
                .to_list_string(),
            "0"
        );
        assert_eq!(CpuSet::parse_mask("0").unwrap(), CpuSet::new());
        // nr_cpu_ids = 4: the kernel prints a single digit.
        assert_eq!(l("0-1").to_mask_string_width(4), "3");
        // nr_cpu_ids = 36 and 64.
        assert_eq!(l("0").to_mask_string_width(36), "0,00000001");
        assert_eq!(l("32-35").to_mask_string_width(64), "0000000f,00000000");
        assert_eq!(CpuSet::new().to_mask_string(), "0");
    }

    #[test]
    fn more_than_1024_cpus() {
        let s = l("0,1023-1025,4095");
        assert_eq!(s.len(), 5);
        assert_eq!(s.last(), Some(4095));
        let m = s.to_mask_string();
        assert_eq!(m.split(',').count(), 128);
        assert_eq!(CpuSet::parse_mask(&m).unwrap(), s);
        let bm = s.to_kernel_bitmap(0);
        assert_eq!(bm.len(), 512);
        assert_eq!(CpuSet::from_kernel_bitmap(&bm), s);
    }

    #[test]
    fn algebra() {
        let a = l("0-7");
        let b = l("4-11");
        assert_eq!((&a | &b).to_string(), "0-11");
        assert_eq!((&a & &b).to_string(), "4-7");
        assert_eq!((&a - &b).to_string(), "0-3");
        assert!(l("2-3").is_subset(&a));
        assert!(!b.is_subset(&a));
        assert!(l("0-1").is_disjoint(&l("2-3")));
        let mut c = l("64");
        c.remove(64);
        assert_eq!(c, CpuSet::new(), "removing the top CPU trims storage");
        // Removing a CPU beyond the storage (the first word past it, or farther) is a no-op.
        c.remove(3);
        let mut d = l("0,63");
        d.remove(64);
        d.remove(127);
        d.remove(5000);
        assert_eq!(
            (c.to_string(), d.to_string()),
            (String::new(), "0,63".to_string())
        );
        assert!(l("0-1") < l("0-2"));
    }

    #[test]
    fn bad_input_names_the_input() {
        for bad in [
            "1-",
            "a",
            "3-1",
            "0,,1",
            "0-3:0/4",
            "0-3:3/2",
            "0-3:0",
            "0-3:x",
            "99999999999",
            "-1",
        ] {
            let e = CpuSet::parse_list(bad).unwrap_err();
            assert_eq!(e.input, bad);
            assert!(e.to_string().contains(&format!("{bad:?}")), "{e}");
        }
        for bad in ["", "xyz", "123456789,0", "f,,f", "0x", "+f,0", "f,-1"] {
            let e = CpuSet::parse_mask(bad).unwrap_err();
            assert_eq!(e.input, bad);
            assert!(e.to_string().starts_with("invalid CPU mask"), "{e}");
        }
        let e = CpuSet::parse_list("0-2000000").unwrap_err();
        assert!(e.reason.contains("beyond"), "{e}");
    }

    fn arb_set() -> impl Strategy<Value = CpuSet> {
        prop::collection::vec(0usize..5000, 0..64).prop_map(|v| v.into_iter().collect())
    }

    /// A list longer than any kernel prints is refused, naming its length; one of strided
    /// whole ranges up to the cap parses (a word at a time: milliseconds, not seconds).
    #[test]
    fn long_lists_are_capped_and_strided_ones_parse_by_words() {
        let el = |i: usize| format!("{}-1048575:1/{}", i % 7, 2 + i % 5);
        let mut list = String::new();
        let mut i = 0;
        while list.len() + 24 < CpuSet::MAX_LIST_BYTES {
            if i > 0 {
                list.push(',');
            }
            list.push_str(&el(i));
            i += 1;
        }
        let t = std::time::Instant::now();
        let s = CpuSet::parse_list(&list).unwrap();
        eprintln!("{} strided elements parsed in {:?}", i, t.elapsed());
        assert!(s.contains(0) && s.contains(1_048_575));
        let long = format!("{list},{}", "5,".repeat(CpuSet::MAX_LIST_BYTES / 2));
        let e = CpuSet::parse_list(&long).unwrap_err().to_string();
        assert!(e.contains("longer than any kernel prints"), "{e}");
    }

    proptest! {
        /// A strided range, word by word, is the CPUs the list format says, one by one.
        #[test]
        fn strided_ranges_agree_with_cpu_by_cpu(
            lo in 0usize..300, len in 0usize..400, used in 1usize..130, extra in 0usize..130,
        ) {
            let (hi, group) = (lo + len, used + extra);
            let got = CpuSet::parse_list(&format!("{lo}-{hi}:{used}/{group}")).unwrap();
            let want: CpuSet = (lo..=hi).filter(|c| (c - lo) % group < used).collect();
            prop_assert_eq!(got, want);
        }

        #[test]
        fn list_round_trips(s in arb_set()) {
            prop_assert_eq!(CpuSet::parse_list(&s.to_list_string()).unwrap(), s);
        }

        #[test]
        fn mask_round_trips(s in arb_set(), extra in 0usize..300) {
            let width = s.last().map_or(1, |x| x + 1) + extra;
            prop_assert_eq!(CpuSet::parse_mask(&s.to_mask_string_width(width)).unwrap(), s.clone());
            prop_assert_eq!(CpuSet::parse_mask(&s.to_mask_string()).unwrap(), s);
        }

        #[test]
        fn bitmap_round_trips(s in arb_set()) {
            prop_assert_eq!(CpuSet::from_kernel_bitmap(&s.to_kernel_bitmap(128)), s);
        }

        #[test]
        fn algebra_agrees_with_btreeset(a in arb_set(), b in arb_set()) {
            use std::collections::BTreeSet;
            let sa: BTreeSet<usize> = a.iter().collect();
            let sb: BTreeSet<usize> = b.iter().collect();
            prop_assert_eq!(a.union(&b).iter().collect::<BTreeSet<_>>(), &sa | &sb);
            prop_assert_eq!(a.intersection(&b).iter().collect::<BTreeSet<_>>(), &sa & &sb);
            prop_assert_eq!(a.difference(&b).iter().collect::<BTreeSet<_>>(), &sa - &sb);
            prop_assert_eq!(a.is_subset(&b), sa.is_subset(&sb));
            prop_assert_eq!(a.len(), sa.len());
        }

        /// Every point operation against BTreeSet, so the public API that no caller uses yet
        /// (first_n, insert_range, remove, first) is as tested as the parsers.
        #[test]
        fn point_operations_agree_with_btreeset(
            start in arb_set(),
            ops in prop::collection::vec((0u8..3, 0usize..300, 0usize..70), 0..40),
        ) {
            use std::collections::BTreeSet;
            let mut s = start.clone();
            let mut model: BTreeSet<usize> = start.iter().collect();
            for (op, cpu, n) in ops {
                match op {
                    0 => { s.insert(cpu); model.insert(cpu); }
                    1 => { s.remove(cpu); model.remove(&cpu); }
                    _ => { s.insert_range(cpu, cpu + n); model.extend(cpu..cpu + n); }
                }
                prop_assert_eq!(s.iter().collect::<BTreeSet<_>>(), model.clone());
                prop_assert_eq!(s.first(), model.first().copied());
                prop_assert_eq!(s.last(), model.last().copied());
                prop_assert_eq!(s.len(), model.len());
                prop_assert_eq!(s.is_empty(), model.is_empty());
                prop_assert_eq!(s.contains(cpu), model.contains(&cpu));
                // Storage stays trimmed: equal to the same set built afresh.
                prop_assert_eq!(&s, &model.iter().copied().collect::<CpuSet>());
            }
        }

        /// Dense sets (word-aligned and not, whole words, runs across words): the runs and
        /// the list against a walk over the CPUs one by one.
        #[test]
        fn runs_and_lists_agree_with_a_walk(
            ranges in prop::collection::vec((0usize..600, 0usize..130), 0..12),
        ) {
            let mut s = CpuSet::new();
            for (a, n) in ranges {
                s.insert_range(a, a + n);
            }
            let mut want: Vec<(usize, usize)> = Vec::new();
            for c in s.iter() {
                match want.last_mut() {
                    Some((_, hi)) if *hi + 1 == c => *hi = c,
                    _ => want.push((c, c)),
                }
            }
            prop_assert_eq!(s.runs().collect::<Vec<_>>(), want.clone());
            let text = want
                .iter()
                .map(|(a, b)| if a == b { a.to_string() } else { format!("{a}-{b}") })
                .collect::<Vec<_>>()
                .join(",");
            prop_assert_eq!(s.to_list_string(), text.clone());
            prop_assert_eq!(CpuSet::parse_list(&text).unwrap(), s);
        }

        #[test]
        fn first_n_is_0_to_n(n in 0usize..300) {
            let s = CpuSet::first_n(n);
            prop_assert_eq!(s.iter().collect::<Vec<_>>(), (0..n).collect::<Vec<_>>());
        }

        #[test]
        fn garbage_never_panics(s in "\\PC{0,40}") {
            let _ = CpuSet::parse_list(&s);
            let _ = CpuSet::parse_mask(&s);
        }
    }
}
