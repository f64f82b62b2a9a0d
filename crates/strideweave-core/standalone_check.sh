#!/usr/bin/env bash
# Builds a crate outside the workspace against strideweave-core by path, with every warning
# an error: the core must be usable as a plain dependency (issue 25). Offline, with the
# workspace's lock file, so it resolves the same versions the workspace already fetched.
set -euo pipefail
core="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$core/../.." && pwd)"
dir="$(mktemp -d /tmp/strideweave-standalone.XXXXXX)"
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/src"
cat > "$dir/Cargo.toml" <<TOML
[package]
name = "strideweave-standalone-user"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
strideweave-core = { path = "$core" }

[workspace]
TOML
cat > "$dir/src/main.rs" <<'RS'
use strideweave_core::model::{move_tensor, FileCarrier, HostCarrier, Tensor};
use strideweave_core::storage::ElemKind;

fn main() {
    let t = Tensor::canonical(HostCarrier::from_f32(&[1.0, 2.0]), &[2]).unwrap();
    let file = FileCarrier::temp(ElemKind::F32).unwrap();
    let moved = move_tensor(&t, &file).unwrap();
    assert_eq!(moved.get::<f32>(1).unwrap(), 2.0);
}
RS
cp "$root/Cargo.lock" "$dir/Cargo.lock"
CARGO_TARGET_DIR="$root/target/standalone" RUSTFLAGS="-D warnings" cargo build --offline --quiet --manifest-path "$dir/Cargo.toml"
CARGO_TARGET_DIR="$root/target/standalone" cargo run --offline --quiet --manifest-path "$dir/Cargo.toml"
echo "standalone crate: built against strideweave-core by path with no warning, and ran"
