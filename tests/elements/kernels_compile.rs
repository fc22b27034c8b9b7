// SPDX-License-Identifier: MPL-2.0

//! Every kernel module compiles with NVRTC, so that a broken kernel fails
//! CI on a machine without a GPU. NVRTC comes from the
//! `nvidia-cuda-nvrtc-cu12` wheel there (point `CUDAIPC_NVRTC_LIB` at its
//! `libnvrtc.so.12`); without NVRTC the test says SKIPPED loudly, or fails
//! when `CUDAIPC_REQUIRE_NVRTC=1`.

use cudaipc_transport::cuda::nvrtc::{self, Image, Target};
use gstcudaipc::pattern::kernels::SOURCES;

fn nvrtc_or_skip(test: &str) -> bool {
    match nvrtc::describe() {
        Ok((path, (major, minor))) => {
            eprintln!("{test}: NVRTC {major}.{minor} from {path}");
            true
        }
        Err(e) => {
            if std::env::var("CUDAIPC_REQUIRE_NVRTC").is_ok_and(|v| v == "1") {
                panic!("{test}: CUDAIPC_REQUIRE_NVRTC=1 but NVRTC is not usable: {e}");
            }
            eprintln!("SKIPPED: NVRTC not found ({test}: {e})");
            false
        }
    }
}

/// The kernels each module must define (what the elements launch).
const ENTRY_POINTS: &[(&str, &[&str])] = &[
    ("cudaipc-generate", &["generate"]),
    (
        "cudaipc-process",
        &[
            "process_invert",
            "process_brightness",
            "process_gamma",
            "process_grayscale",
        ],
    ),
    ("cudaipc-verify", &["verify_counter"]),
];

fn compile_all(target: Target) {
    assert_eq!(SOURCES.len(), ENTRY_POINTS.len());
    for (name, source) in SOURCES {
        let image = nvrtc::compile(source, name, target)
            .unwrap_or_else(|e| panic!("{name} does not compile for {target:?}:\n{e}"));
        let Image::Ptx(ptx) = image else {
            panic!("{name}: asked for PTX");
        };
        let ptx = String::from_utf8_lossy(&ptx);
        // For reading the generated code: CUDAIPC_DUMP_PTX=<folder>.
        if let Some(dir) = std::env::var_os("CUDAIPC_DUMP_PTX") {
            let (major, minor) = match target {
                Target::Ptx(major, minor) | Target::Sass(major, minor) => (major, minor),
            };
            let path = std::path::Path::new(&dir).join(format!("{name}-{major}{minor}.ptx"));
            std::fs::write(&path, ptx.as_bytes()).unwrap();
        }
        let (_, entries) = ENTRY_POINTS
            .iter()
            .find(|(module, _)| module == name)
            .unwrap_or_else(|| panic!("no entry points listed for {name}"));
        for entry in *entries {
            assert!(
                ptx.contains(&format!(".entry {entry}(")),
                "{name} for {target:?} lacks the kernel {entry}"
            );
        }
    }
}

#[test]
fn every_kernel_compiles_for_compute_90() {
    if nvrtc_or_skip("every_kernel_compiles_for_compute_90") {
        compile_all(Target::Ptx(9, 0));
    }
}

#[test]
fn every_kernel_compiles_for_compute_75() {
    if nvrtc_or_skip("every_kernel_compiles_for_compute_75") {
        compile_all(Target::Ptx(7, 5));
    }
}

#[test]
fn a_broken_kernel_reports_the_compiler_log() {
    if !nvrtc_or_skip("a_broken_kernel_reports_the_compiler_log") {
        return;
    }
    let broken = format!(
        "{}\nextern \"C\" __global__ void oops() {{ undeclared(); }}\n",
        SOURCES[0].1
    );
    let error = nvrtc::compile(&broken, "broken", Target::Ptx(9, 0))
        .expect_err("an undeclared function must not compile")
        .to_string();
    assert!(error.contains("undeclared"), "no compiler log in: {error}");
    assert!(
        error.contains("libnvrtc"),
        "the library is not named in: {error}"
    );
}
