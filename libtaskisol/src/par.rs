//! Per-thread passes spread over the CPUs this process may run on: reading every thread of a
//! host with tens of thousands, and changing or restoring each one's affinity, are
//! independent system calls (or file reads) that a big host has the CPUs for.
//!
//! Workers are taken only from this process's own affinity (`available_parallelism` reads
//! it, and a cgroup's CPU quota), so a daemon pinned to the housekeeping CPUs stays there.
//! Results come back in the order of the items, whatever the workers' timing.

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicUsize, Ordering};

/// At most this many workers: the passes are system calls, and the kernel's locks (the
/// task list, the runqueues) stop them scaling long before a big host's CPU count.
const MAX_WORKERS: usize = 8;

/// Items a worker claims at a time: small enough to balance cheap items (kernel threads)
/// against dear ones, large enough that claiming costs nothing.
const BLOCK: usize = 64;

/// How many workers for `n` items when each worker should have at least `per_worker`.
pub fn workers(n: usize, per_worker: usize) -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
    cpus.min(MAX_WORKERS).min(n / per_worker.max(1)).max(1)
}

/// `f` of every item, in the items' order; on up to [`workers`] threads when there are at
/// least `per_worker` items for each (one thread, this one, otherwise).
pub fn map<T: Sync, R: Send>(items: &[T], per_worker: usize, f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let w = workers(items.len(), per_worker);
    if w <= 1 {
        return items.iter().map(f).collect();
    }
    let next = AtomicUsize::new(0);
    let work = || {
        let mut done: Vec<(usize, Vec<R>)> = Vec::new();
        loop {
            let start = next.fetch_add(BLOCK, Ordering::Relaxed);
            if start >= items.len() {
                return done;
            }
            let end = (start + BLOCK).min(items.len());
            done.push((start, items[start..end].iter().map(&f).collect()));
        }
    };
    let mut blocks: Vec<(usize, Vec<R>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..w).map(|_| s.spawn(work)).collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    blocks.sort_unstable_by_key(|(start, _)| *start);
    blocks.into_iter().flat_map(|(_, r)| r).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_keep_the_items_order_on_any_number_of_workers() {
        let items: Vec<u64> = (0..10_000).collect();
        let seen = std::sync::Mutex::new(std::collections::HashSet::new());
        let out = map(&items, 1, |x| {
            seen.lock().unwrap().insert(std::thread::current().id());
            // Slow enough that one worker cannot take every block before another starts.
            if x % 100 == 0 {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            x * 3
        });
        assert_eq!(out, items.iter().map(|x| x * 3).collect::<Vec<_>>());
        if workers(items.len(), 1) > 1 {
            assert!(seen.lock().unwrap().len() > 1, "more than one worker ran");
        }
        // Too few items for a second worker: all on this thread.
        let me = std::thread::current().id();
        let here = map(&items[..10], 100, |_| std::thread::current().id());
        assert!(here.iter().all(|t| *t == me));
        assert!(map(&[] as &[u8], 1, |x| *x).is_empty());
    }

    #[test]
    fn worker_count_follows_the_items_and_the_cap() {
        assert_eq!(workers(0, 100), 1);
        assert_eq!(workers(99, 100), 1);
        let cpus = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
        assert_eq!(workers(1_000_000, 1), cpus.min(MAX_WORKERS));
        assert_eq!(workers(200, 100), cpus.min(2));
    }

    #[test]
    #[should_panic(expected = "item 5000")]
    fn a_workers_panic_reaches_the_caller() {
        let items: Vec<u32> = (0..10_000).collect();
        map(&items, 1, |x| {
            assert!(*x != 5000, "item 5000");
            *x
        });
    }
}
