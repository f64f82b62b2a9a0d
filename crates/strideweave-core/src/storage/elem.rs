//! Element encodings a carrier slot can hold natively.

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

/// One slot read or written with a single atomic access (`Relaxed`): the element path of
/// host carriers, where a biased access and a locked one may touch the same slot from
/// two threads (see `model::element_bias`); plain accesses there would be a data race.
impl ElemKind {
    /// Load the slot at `p`.
    ///
    /// # Safety
    /// `p` is aligned to this kind's size and valid for reading that many bytes, and every
    /// non-atomic access to them is ordered before or after this load (happens-before).
    #[inline]
    pub(crate) unsafe fn load_atomic(self, p: *const u8) -> Scalar {
        use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering::Relaxed};
        // SAFETY (each arm): the caller's contract; the atomic type has the kind's size and
        // alignment.
        unsafe {
            match self {
                ElemKind::F32 => Scalar::F32(f32::from_bits(AtomicU32::from_ptr(p as *mut u32).load(Relaxed))),
                ElemKind::F64 => Scalar::F64(f64::from_bits(AtomicU64::from_ptr(p as *mut u64).load(Relaxed))),
                ElemKind::I32 => Scalar::I32(AtomicU32::from_ptr(p as *mut u32).load(Relaxed) as i32),
                ElemKind::Bool => Scalar::Bool(AtomicU8::from_ptr(p as *mut u8).load(Relaxed) != 0),
            }
        }
    }

    /// Store `value`, which the caller has checked suits this kind, into the slot at `p`.
    ///
    /// # Safety
    /// As [`load_atomic`](Self::load_atomic), for writing.
    #[inline]
    pub(crate) unsafe fn store_atomic(self, p: *mut u8, value: Scalar) {
        use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering::Relaxed};
        // SAFETY (each arm): the caller's contract; the atomic type has the kind's size and
        // alignment.
        unsafe {
            match (self, value) {
                (ElemKind::F32, Scalar::F32(v)) => AtomicU32::from_ptr(p as *mut u32).store(v.to_bits(), Relaxed),
                (ElemKind::F64, Scalar::F64(v)) => AtomicU64::from_ptr(p as *mut u64).store(v.to_bits(), Relaxed),
                (ElemKind::I32, Scalar::I32(v)) => AtomicU32::from_ptr(p as *mut u32).store(v as u32, Relaxed),
                (ElemKind::Bool, Scalar::Bool(v)) => AtomicU8::from_ptr(p).store(v as u8, Relaxed),
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
