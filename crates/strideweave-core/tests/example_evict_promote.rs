//! Runs the logic of `examples/evict_promote.rs`, so the example cannot rot.

#[path = "../examples/evict_promote.rs"]
mod evict_promote;

#[test]
fn the_evict_promote_example_keeps_every_value() {
    assert_eq!(evict_promote::run(4).unwrap(), vec![-1.0, 1.0, 2.0, 3.0]);
}
