//! `shape!` and `layout!`: flat shapes and layouts written inline, in the `shape : stride`
//! notation of CuTe. Each evaluates to a `Result` (an extent may be negative, a size may
//! overflow). Nested modes are built with `Shape`/`Stride` trees directly.

/// A flat [`Shape`](crate::layout::Shape) from its extents: `shape![2, 3]` is
/// `Shape::flat(&[2, 3])`. Evaluates to `Result<Shape, LayoutError>`.
///
/// ```
/// use strideweave_core::layout::Shape;
/// use strideweave_core::shape;
/// assert_eq!(shape![2, 3].unwrap(), Shape::flat(&[2, 3]).unwrap());
/// assert!(shape![2, -1].is_err());
/// ```
#[macro_export]
macro_rules! shape {
    ($($extent:expr),+ $(,)?) => {
        $crate::layout::Shape::flat(&[$(($extent) as i64),+])
    };
}

/// A flat [`Layout`](crate::layout::Layout) from extents and strides:
/// `layout!([2, 3] : [1, 2])` is the 2 × 3 column-major layout. Evaluates to
/// `Result<Layout, LayoutError>`.
///
/// ```
/// use strideweave_core::layout;
/// let l = layout!([2, 3] : [3, 1]).unwrap(); // row-major
/// assert_eq!((l.size(), l.cosize(), l.index_of_int(1)), (6, 6, 3));
/// assert!(layout!([2] : [1, 1]).is_err()); // not congruent
/// ```
#[macro_export]
macro_rules! layout {
    ([$($extent:expr),+ $(,)?] : [$($stride:expr),+ $(,)?]) => {
        $crate::layout::Shape::flat(&[$(($extent) as i64),+]).and_then(|shape| {
            $crate::layout::Stride::flat(&[$(($stride) as i64),+])
                .and_then(|stride| $crate::layout::Layout::new(shape, stride))
        })
    };
}
