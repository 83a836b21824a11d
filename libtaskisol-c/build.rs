//! The shared library's soname: libtaskisol.so.<major>, as cargo-c would set it, so that a C
//! program linked against it keeps working across compatible updates.
fn main() {
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").unwrap_or_else(|_| "0".into());
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libtaskisol.so.{major}");
}
