//! `SetOnce<T>`: a value written at most once, read with one atomic load.
//!
//! It replaces `std::sync::OnceLock` in the fields of native base classes. CPython allocates
//! an instance zero-filled, and the garbage collector may traverse an instance of a Python
//! subclass before PyO3 has written its Rust fields; a zero-filled `OnceLock` reads as
//! *initialised* (its "complete" state is 0), so `__traverse__` would visit a null object.
//! Here all-zero bytes are a null pointer, which reads as "not set".

use std::sync::atomic::{AtomicPtr, Ordering};

pub(crate) struct SetOnce<T>(AtomicPtr<T>);

impl<T> Default for SetOnce<T> {
    fn default() -> Self {
        SetOnce(AtomicPtr::new(std::ptr::null_mut()))
    }
}

impl<T> SetOnce<T> {
    pub(crate) fn get(&self) -> Option<&T> {
        let p = self.0.load(Ordering::Acquire);
        // SAFETY: a non-null pointer was stored by `set` from `Box::into_raw` and is freed only
        // by `drop`, which needs `&mut self`; so it points to a live `T` for as long as `&self`.
        unsafe { p.as_ref() }
    }

    /// Stores `value` if nothing is stored yet; otherwise hands it back.
    pub(crate) fn set(&self, value: T) -> Result<(), T> {
        let fresh = Box::into_raw(Box::new(value));
        match self.0.compare_exchange(std::ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => Ok(()),
            // SAFETY: `fresh` came from `Box::into_raw` just above and was not published.
            Err(_) => Err(*unsafe { Box::from_raw(fresh) }),
        }
    }
}

impl<T> Drop for SetOnce<T> {
    fn drop(&mut self) {
        let p = *self.0.get_mut();
        if !p.is_null() {
            // SAFETY: `p` came from `Box::into_raw` in `set` and is dropped only here, once.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}

// SAFETY: `SetOnce<T>` hands out `&T` to any thread and moves a `T` in from any thread,
// exactly as `OnceLock<T>` does, under the same bounds.
unsafe impl<T: Send + Sync> Sync for SetOnce<T> {}
// SAFETY: owning a `SetOnce<T>` is owning an `Option<Box<T>>`.
unsafe impl<T: Send> Send for SetOnce<T> {}

#[cfg(test)]
mod tests {
    use super::SetOnce;

    #[test]
    fn zeroed_reads_as_unset_and_set_happens_once() {
        // SAFETY: all-zero bytes are a valid null `AtomicPtr`.
        let z: SetOnce<String> = unsafe { std::mem::zeroed() };
        assert!(z.get().is_none());
        assert!(z.set("a".into()).is_ok());
        assert_eq!(z.set("b".into()), Err("b".to_string()));
        assert_eq!(z.get().map(String::as_str), Some("a"));
    }
}
