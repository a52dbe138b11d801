//! Generates the libfabric bindings at build time.
//!
//! bindgen reads Debian's libfabric headers (package libfabric-dev) for the types,
//! constants and the static-inline functions fperf calls (`fi_domain`, `fi_send`,
//! `fi_cq_read`, ...). Those inline functions only call through the ops tables inside
//! libfabric's objects, so their C wrappers (`wrap_static_fns`, compiled here with the
//! `cc` crate) need no link to libfabric. The few exported functions (`fi_getinfo`,
//! `fi_fabric`, ...) are NOT declared here: fperf loads `libfabric.so.1` at run time,
//! so the binary starts, and runs TCP and UDP, on machines without libfabric.

use std::env;
use std::path::PathBuf;

/// The static-inline libfabric functions fperf uses.
const INLINE_FNS: &[&str] = &[
    "fi_close",
    "fi_domain",
    "fi_endpoint",
    "fi_cq_open",
    "fi_av_open",
    "fi_av_insert",
    "fi_ep_bind",
    "fi_enable",
    "fi_getname",
    "fi_mr_reg",
    "fi_mr_desc",
    "fi_mr_key",
    "fi_send",
    "fi_senddata",
    "fi_recv",
    "fi_writedata",
    "fi_cq_read",
    "fi_cq_readerr",
    "fi_cq_strerror",
];

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let wrappers = out.join("ofi_inline_wrappers");
    let header = "#include <rdma/fabric.h>\n#include <rdma/fi_domain.h>\n\
                  #include <rdma/fi_endpoint.h>\n#include <rdma/fi_cm.h>\n\
                  #include <rdma/fi_rma.h>\n#include <rdma/fi_eq.h>\n\
                  #include <rdma/fi_errno.h>\n";
    let mut builder = bindgen::Builder::default()
        .header_contents("ofi.h", header)
        .wrap_static_fns(true)
        .wrap_static_fns_path(&wrappers)
        .allowlist_type("fi_info")
        .allowlist_type("fid_.*")
        .allowlist_type("fi_cq_attr")
        .allowlist_type("fi_av_attr")
        .allowlist_type("fi_cq_data_entry")
        .allowlist_type("fi_cq_err_entry")
        .allowlist_type("fi_context2")
        .allowlist_var("FI_.*")
        .derive_default(true)
        .layout_tests(false)
        .generate_comments(false);
    for f in INLINE_FNS {
        builder = builder.allowlist_function(f);
    }
    let bindings = builder.generate().unwrap_or_else(|e| {
        panic!("bindgen could not read the libfabric headers ({e}); install libfabric-dev and libclang-dev (scripts/setup.sh)")
    });
    bindings
        .write_to_file(out.join("ofi_bindings.rs"))
        .expect("write ofi_bindings.rs");
    // The wrappers' C file includes the headers it wraps.
    let c_file = wrappers.with_extension("c");
    let body = std::fs::read_to_string(&c_file).expect("read generated wrappers");
    std::fs::write(&c_file, format!("{header}{body}")).expect("write wrappers");
    cc::Build::new()
        .file(&c_file)
        .warnings(false)
        .compile("fperf_ofi_inline");
}
