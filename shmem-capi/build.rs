//! Gives the C library the SONAME C programs link against (`libshmem.so`),
//! and compiles the `long double` arithmetic Rust cannot express
//! (`csrc/longdouble.c`) with the system C compiler.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libshmem.so");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=csrc/longdouble.c");
    cc::Build::new()
        .file("csrc/longdouble.c")
        .warnings(true)
        .extra_warnings(true)
        .compile("shmemrs_longdouble");
}
