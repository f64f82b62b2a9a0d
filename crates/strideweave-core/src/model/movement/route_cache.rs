//! The cache of resolved route decisions, one per exact (source class, destination class) pair.
//!
//! A binding whose routes are chosen by registries it does not own (the Python package's
//! `MoveOperation` registry and carrier definitions) resolves a pair once into a frozen
//! decision of its own type `V` and keeps it here; every later move of the pair reads it
//! back without asking the registries again. A registry change calls [`RouteCache::forget`],
//! which drops every decision and starts a new *generation*: a resolution that began before
//! the change carries the old generation, and [`RouteCache::remember`] refuses to store it,
//! so a decision computed from a registry that changed meanwhile is never cached (the caller
//! still uses it for the one move that asked, as it was the registry's answer when asked).
//!
//! Reads take a shared lock only; the cache never calls back into its caller.
//!
//! ```
//! use strideweave_core::model::{ClassKey, RouteCache};
//!
//! let cache: RouteCache<&'static str> = RouteCache::new();
//! let (a, b) = (ClassKey::Foreign(1), ClassKey::Foreign(2));
//! let asked = cache.generation();
//! assert_eq!(cache.get(a, b), None);
//! assert_eq!(cache.remember(a, b, "default", asked), "default");
//! assert_eq!(cache.get(a, b), Some("default"));
//!
//! // A registry change while another resolution was running: that one is not cached.
//! let stale = cache.generation();
//! cache.forget();
//! assert_eq!(cache.remember(a, b, "stale", stale), "stale");
//! assert_eq!(cache.get(a, b), None);
//! ```

use std::collections::hash_map::Entry;

use parking_lot::RwLock;
use rustc_hash::FxHashMap;

use crate::model::carrier::ClassKey;

/// Resolved route decisions by exact class pair, with the generation of the registries they
/// were resolved from (see the module docs).
#[derive(Debug)]
pub struct RouteCache<V> {
    inner: RwLock<Entries<V>>,
}

#[derive(Debug)]
struct Entries<V> {
    generation: u64,
    // Fx, not SipHash: every move looks its pair up, and the keys are class identities the
    // program made, not input an attacker chooses.
    by_pair: FxHashMap<(ClassKey, ClassKey), V>,
}

impl<V> Default for RouteCache<V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<V> RouteCache<V> {
    /// An empty cache at generation 0.
    pub fn new() -> Self {
        RouteCache { inner: RwLock::new(Entries { generation: 0, by_pair: FxHashMap::default() }) }
    }

    /// The current generation: read it before resolving a pair, pass it to
    /// [`remember`](Self::remember).
    pub fn generation(&self) -> u64 {
        self.inner.read().generation
    }

    /// Drops every decision and starts a new generation; returns the decisions dropped, so
    /// that a caller whose decisions own foreign objects can let go of them outside any lock
    /// of its own.
    #[must_use = "drop the forgotten decisions where dropping them is safe"]
    pub fn forget(&self) -> Vec<V> {
        let mut entries = self.inner.write();
        entries.generation += 1;
        entries.by_pair.drain().map(|(_, v)| v).collect()
    }

    /// The number of pairs decided in the current generation.
    pub fn len(&self) -> usize {
        self.inner.read().by_pair.len()
    }

    /// Whether no pair is decided.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<V: Clone> RouteCache<V> {
    /// The decision of the pair, if one is cached.
    #[inline]
    pub fn get(&self, source: ClassKey, destination: ClassKey) -> Option<V> {
        self.inner.read().by_pair.get(&(source, destination)).cloned()
    }

    /// Stores `decision` for the pair if the registries have not changed since `generation`
    /// was read, and returns the decision every caller should use from now on: the one
    /// already cached (a racing resolution of the same generation got there first), else
    /// `decision` itself, cached or not.
    ///
    /// A decision that is not kept is dropped after the lock is let go (dropping a foreign
    /// object may run the foreign side's code, which may use this cache).
    pub fn remember(&self, source: ClassKey, destination: ClassKey, decision: V, generation: u64) -> V {
        let mut entries = self.inner.write();
        if entries.generation != generation {
            return decision;
        }
        let kept = match entries.by_pair.entry((source, destination)) {
            Entry::Occupied(cached) => Some(cached.get().clone()),
            Entry::Vacant(slot) => {
                slot.insert(decision.clone());
                None
            }
        };
        drop(entries);
        kept.unwrap_or(decision)
    }
}

impl<V> RouteCache<V> {
    /// `f` of the pair's cached decision, read under the shared lock without cloning it (a
    /// hot path's question, such as "is this pair served natively?"). `f` must not use this
    /// cache.
    #[inline]
    pub fn with<R>(&self, source: ClassKey, destination: ClassKey, f: impl FnOnce(Option<&V>) -> R) -> R {
        f(self.inner.read().by_pair.get(&(source, destination)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn the_first_decision_of_a_generation_wins() {
        let cache = RouteCache::new();
        let (a, b) = (ClassKey::Foreign(10), ClassKey::Foreign(11));
        let g = cache.generation();
        assert_eq!(cache.remember(a, b, 1, g), 1);
        assert_eq!(cache.remember(a, b, 2, g), 1);
        assert_eq!(cache.get(b, a), None, "pairs are ordered");
    }

    #[test]
    fn forget_drops_everything_and_refuses_older_resolutions() {
        let cache = RouteCache::new();
        let (a, b) = (ClassKey::Foreign(1), ClassKey::Foreign(2));
        let g = cache.generation();
        cache.remember(a, b, "x", g);
        assert_eq!(cache.forget(), vec!["x"]);
        assert!(cache.is_empty());
        assert_eq!(cache.remember(a, b, "old", g), "old");
        assert!(cache.is_empty());
        let now = cache.generation();
        assert_eq!(cache.remember(a, b, "new", now), "new");
        assert_eq!(cache.get(a, b), Some("new"));
    }

    #[test]
    fn racing_resolutions_and_registry_changes_never_cache_a_stale_decision() {
        // Each resolver reads the generation, "resolves" to the registry value it saw, and
        // remembers it; the changer bumps the registry value and forgets. Whatever is cached
        // at the end must be the registry's last value or nothing.
        let cache = Arc::new(RouteCache::new());
        let registry = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (a, b) = (ClassKey::Foreign(3), ClassKey::Foreign(4));
        let mut threads = Vec::new();
        for _ in 0..4 {
            let (cache, registry) = (cache.clone(), registry.clone());
            threads.push(std::thread::spawn(move || {
                for _ in 0..2000 {
                    if cache.get(a, b).is_none() {
                        let g = cache.generation();
                        let seen = registry.load(std::sync::atomic::Ordering::SeqCst);
                        cache.remember(a, b, seen, g);
                    }
                }
            }));
        }
        {
            let (cache, registry) = (cache.clone(), registry.clone());
            threads.push(std::thread::spawn(move || {
                for _ in 0..500 {
                    registry.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    drop(cache.forget());
                }
            }));
        }
        for t in threads {
            t.join().unwrap();
        }
        let last = registry.load(std::sync::atomic::Ordering::SeqCst);
        let cached = cache.get(a, b);
        assert!(cached.is_none() || cached == Some(last), "cached {cached:?}, registry at {last}");
    }
}
