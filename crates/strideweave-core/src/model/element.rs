//! Typed element access: the Rust types a slot value converts to and from.
//!
//! [`Element`] is implemented for `f32`, `f64`, `i32`, `bool` (one element kind each) and for
//! [`Scalar`] (any kind), so `t.get::<f32>(k)` reads a typed value and `t.get::<Scalar>(k)`
//! whatever the tensor holds. [`SliceElement`] marks the kinds whose slots are plain values
//! of the Rust type in host memory (`f32`, `f64`, `i32`), which
//! [`Tensor::as_slice`](super::Tensor::as_slice) can lend as a slice.
//!
//! ```
//! use strideweave_core::model::{HostCarrier, Tensor};
//! use strideweave_core::storage::Scalar;
//!
//! let t = Tensor::canonical(HostCarrier::from_f32(&[1.5, 2.5]), &[2]).unwrap();
//! t.set(1, 4.0f32).unwrap();
//! assert_eq!(t.get::<f32>(1).unwrap(), 4.0);
//! assert_eq!(t.get::<Scalar>(0).unwrap(), Scalar::F32(1.5));
//! assert!(t.get::<i32>(0).is_err()); // an f32 tensor holds no i32
//! ```

use super::error::{ModelError, Result};
use crate::storage::{ElemKind, Scalar};

mod sealed {
    use crate::storage::{AtomicSlot, ElemKind, Scalar};

    /// Closes [`Element`](super::Element), and holds the typed slot accesses of the biased
    /// element path (crate-private: the trait is unnameable outside).
    pub trait Sealed: Sized {
        /// Load the slot at `p`, which holds a value of `kind`.
        ///
        /// # Safety
        /// As `AtomicSlot::load_atomic`; `kind` is this type's kind when it has one.
        unsafe fn load_slot(p: *const u8, kind: ElemKind) -> Self;

        /// Store into the slot at `p`, of `kind`.
        ///
        /// # Safety
        /// As `AtomicSlot::store_atomic`; the value suits `kind`.
        unsafe fn store_slot(self, p: *mut u8, kind: ElemKind);
    }

    macro_rules! sealed {
        ($($t:ty),*) => {$(
            impl Sealed for $t {
                #[inline]
                unsafe fn load_slot(p: *const u8, _: ElemKind) -> Self {
                    // SAFETY: the caller's contract.
                    unsafe { <$t as AtomicSlot>::load_atomic(p) }
                }

                #[inline]
                unsafe fn store_slot(self, p: *mut u8, _: ElemKind) {
                    // SAFETY: the caller's contract.
                    unsafe { AtomicSlot::store_atomic(self, p) }
                }
            }
        )*};
    }

    sealed!(f32, f64, i32, bool);

    impl Sealed for Scalar {
        #[inline]
        unsafe fn load_slot(p: *const u8, kind: ElemKind) -> Self {
            // SAFETY: the caller's contract.
            unsafe { kind.load_atomic(p) }
        }

        #[inline]
        unsafe fn store_slot(self, p: *mut u8, kind: ElemKind) {
            // SAFETY: the caller's contract.
            unsafe { kind.store_atomic(p, self) }
        }
    }
}

/// A Rust type a slot value converts to and from. Sealed: the element kinds are the
/// storage's.
pub trait Element: Copy + Send + Sync + 'static + sealed::Sealed {
    /// The one element kind this type stands for; `None` for [`Scalar`], which stands for any.
    const KIND: Option<ElemKind>;

    /// The value as a slot value.
    fn to_scalar(self) -> Scalar;

    /// The slot value as this type; `ValueKind` when it is of another kind.
    fn from_scalar(value: Scalar) -> Result<Self>;
}

macro_rules! element {
    ($t:ty, $variant:ident) => {
        impl Element for $t {
            const KIND: Option<ElemKind> = Some(ElemKind::$variant);

            #[inline]
            fn to_scalar(self) -> Scalar {
                Scalar::$variant(self)
            }

            #[inline]
            fn from_scalar(value: Scalar) -> Result<Self> {
                match value {
                    Scalar::$variant(x) => Ok(x),
                    other => Err(ModelError::ValueKind { value: other, kind: ElemKind::$variant }),
                }
            }
        }
    };
}

element!(f32, F32);
element!(f64, F64);
element!(i32, I32);
element!(bool, Bool);

impl Element for Scalar {
    const KIND: Option<ElemKind> = None;

    #[inline]
    fn to_scalar(self) -> Scalar {
        self
    }

    #[inline]
    fn from_scalar(value: Scalar) -> Result<Self> {
        Ok(value)
    }
}

/// An element kind whose slots in host memory are plain, native-endian values of the Rust
/// type, any bit pattern valid: these can be lent as slices (`bool` cannot: a slot byte
/// other than 0 or 1 is no `bool`).
pub trait SliceElement: Element {
    /// The slots' element kind.
    const SLICE_KIND: ElemKind;
}

impl SliceElement for f32 {
    const SLICE_KIND: ElemKind = ElemKind::F32;
}

impl SliceElement for f64 {
    const SLICE_KIND: ElemKind = ElemKind::F64;
}

impl SliceElement for i32 {
    const SLICE_KIND: ElemKind = ElemKind::I32;
}
