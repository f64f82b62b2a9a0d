//! Runs the logic of `examples/roundtrip.rs`, so the example cannot rot.

#[path = "../examples/roundtrip.rs"]
mod roundtrip;

#[test]
fn the_roundtrip_example_restores_every_value() {
    assert_eq!(roundtrip::run().unwrap(), vec![0.5, 1.5, 2.5, 3.5, 4.5, 5.5]);
}
