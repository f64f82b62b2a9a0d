//! Element encodings a carrier slot can hold natively.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};

/// The native encoding of one storage slot.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ElemKind {
    /// 32-bit IEEE float.
    F32,
    /// 64-bit IEEE float.
    F64,
    /// 32-bit signed integer.
    I32,
    /// One byte, 0 or 1.
    Bool,
}

/// A decoded slot value.
#[derive(Copy, Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Scalar {
    /// A 32-bit float.
    F32(f32),
    /// A 64-bit float.
    F64(f64),
    /// A 32-bit signed integer.
    I32(i32),
    /// A boolean.
    Bool(bool),
}

impl ElemKind {
    /// Bytes one slot occupies.
    #[inline]
    pub const fn size(self) -> usize {
        match self {
            ElemKind::F32 | ElemKind::I32 => 4,
            ElemKind::F64 => 8,
            ElemKind::Bool => 1,
        }
    }

    /// The lower-case name (`"f32"`, `"f64"`, `"i32"`, `"bool"`).
    pub fn name(self) -> &'static str {
        match self {
            ElemKind::F32 => "f32",
            ElemKind::F64 => "f64",
            ElemKind::I32 => "i32",
            ElemKind::Bool => "bool",
        }
    }

    /// The specification's dtype name (`"Float32"`, `"Float64"`, `"Int32"`, `"Bool"`), as
    /// refusals print it.
    pub fn dtype_name(self) -> &'static str {
        match self {
            ElemKind::F32 => "Float32",
            ElemKind::F64 => "Float64",
            ElemKind::I32 => "Int32",
            ElemKind::Bool => "Bool",
        }
    }

    /// The kind [`name`](Self::name) returns, if `name` is one.
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "f32" => ElemKind::F32,
            "f64" => ElemKind::F64,
            "i32" => ElemKind::I32,
            "bool" => ElemKind::Bool,
            _ => return None,
        })
    }

    /// Decode one slot from its native-endian bytes (`bytes.len() == self.size()`).
    #[inline]
    pub fn decode(self, bytes: &[u8]) -> Scalar {
        match self {
            ElemKind::F32 => Scalar::F32(f32::from_ne_bytes(bytes[..4].try_into().unwrap())),
            ElemKind::F64 => Scalar::F64(f64::from_ne_bytes(bytes[..8].try_into().unwrap())),
            ElemKind::I32 => Scalar::I32(i32::from_ne_bytes(bytes[..4].try_into().unwrap())),
            ElemKind::Bool => Scalar::Bool(bytes[0] != 0),
        }
    }

    /// Encode one slot; the caller has already checked that `value` suits this kind.
    #[inline]
    pub fn encode(self, value: Scalar, out: &mut [u8]) {
        match (self, value) {
            (ElemKind::F32, Scalar::F32(v)) => out[..4].copy_from_slice(&v.to_ne_bytes()),
            (ElemKind::F64, Scalar::F64(v)) => out[..8].copy_from_slice(&v.to_ne_bytes()),
            (ElemKind::I32, Scalar::I32(v)) => out[..4].copy_from_slice(&v.to_ne_bytes()),
            (ElemKind::Bool, Scalar::Bool(v)) => out[0] = v as u8,
            (kind, value) => panic!("encode: {value:?} does not suit {kind:?}"),
        }
    }
}

/// A value type whose slot is read and written with a single atomic access (`Relaxed`): the
/// element path of host carriers, where a biased access and a locked one may touch the same
/// slot from two threads (see `model::element_bias`); plain accesses there would be a data
/// race. The one place each Rust type meets its atomic: [`ElemKind::load_atomic`] and the
/// typed element access (`model::Element`) both go through it.
pub(crate) trait AtomicSlot: Sized {
    /// Load the slot at `p`.
    ///
    /// # Safety
    /// `p` is aligned to this type's size and valid for reading that many bytes, and every
    /// non-atomic access to them is ordered before or after this load (happens-before).
    unsafe fn load_atomic(p: *const u8) -> Self;

    /// Store into the slot at `p`.
    ///
    /// # Safety
    /// As [`load_atomic`](Self::load_atomic), for writing.
    unsafe fn store_atomic(self, p: *mut u8);
}

macro_rules! atomic_slot {
    ($t:ty, $atomic:ty, $bits:ty, $to:expr, $from:expr) => {
        impl AtomicSlot for $t {
            #[inline]
            unsafe fn load_atomic(p: *const u8) -> Self {
                // SAFETY: the caller's contract; the atomic type has this type's size and
                // alignment.
                let bits = unsafe { <$atomic>::from_ptr(p as *mut $bits) }.load(Ordering::Relaxed);
                $from(bits)
            }

            #[inline]
            unsafe fn store_atomic(self, p: *mut u8) {
                // SAFETY: as in `load_atomic`.
                unsafe { <$atomic>::from_ptr(p as *mut $bits) }.store($to(self), Ordering::Relaxed)
            }
        }
    };
}

atomic_slot!(f32, AtomicU32, u32, f32::to_bits, f32::from_bits);
atomic_slot!(f64, AtomicU64, u64, f64::to_bits, f64::from_bits);
atomic_slot!(i32, AtomicU32, u32, |v: i32| v as u32, |b: u32| b as i32);
atomic_slot!(bool, AtomicU8, u8, |v: bool| v as u8, |b: u8| b != 0);

/// Slots of any kind, through [`AtomicSlot`].
impl ElemKind {
    /// Load the slot at `p`, which holds a value of this kind.
    ///
    /// # Safety
    /// As [`AtomicSlot::load_atomic`], with this kind's size.
    #[inline]
    pub(crate) unsafe fn load_atomic(self, p: *const u8) -> Scalar {
        // SAFETY (each arm): the caller's contract, for the kind's own type.
        unsafe {
            match self {
                ElemKind::F32 => Scalar::F32(f32::load_atomic(p)),
                ElemKind::F64 => Scalar::F64(f64::load_atomic(p)),
                ElemKind::I32 => Scalar::I32(i32::load_atomic(p)),
                ElemKind::Bool => Scalar::Bool(bool::load_atomic(p)),
            }
        }
    }

    /// Store `value`, which the caller has checked suits this kind, into the slot at `p`.
    ///
    /// # Safety
    /// As [`load_atomic`](Self::load_atomic), for writing.
    #[inline]
    pub(crate) unsafe fn store_atomic(self, p: *mut u8, value: Scalar) {
        // SAFETY (each arm): the caller's contract, for the kind's own type.
        unsafe {
            match (self, value) {
                (ElemKind::F32, Scalar::F32(v)) => v.store_atomic(p),
                (ElemKind::F64, Scalar::F64(v)) => v.store_atomic(p),
                (ElemKind::I32, Scalar::I32(v)) => v.store_atomic(p),
                (ElemKind::Bool, Scalar::Bool(v)) => v.store_atomic(p),
                (kind, value) => panic!("store_atomic: {value:?} does not suit {kind:?}"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_kind() {
        for (kind, v) in [
            (ElemKind::F32, Scalar::F32(1.5)),
            (ElemKind::F64, Scalar::F64(-2.25)),
            (ElemKind::I32, Scalar::I32(-7)),
            (ElemKind::Bool, Scalar::Bool(true)),
        ] {
            let mut buf = [0u8; 8];
            kind.encode(v, &mut buf);
            assert_eq!(kind.decode(&buf[..kind.size()]), v);
            assert_eq!(ElemKind::from_name(kind.name()), Some(kind));
        }
    }
}
