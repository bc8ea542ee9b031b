//! Gives the C library the SONAME C programs link against: `libshmem.so`.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libshmem.so");
    println!("cargo:rerun-if-changed=build.rs");
}
