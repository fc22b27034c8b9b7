// SPDX-License-Identifier: MPL-2.0

//! Gives libcudaipc.so its soname, libcudaipc.so.<ABI version>: programs
//! linked against it then load that name, which scripts/install.sh links to
//! the library, so an incompatible libcudaipc.so.1 can sit beside it.

fn main() {
    // The target's, not the build machine's (a cross-build for Windows).
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcudaipc.so.0");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
