//! libfabric, loaded at run time.
//!
//! Types, constants and the static-inline functions come from bindgen at build time
//! (see `build.rs`); the inline functions only call through ops tables inside
//! libfabric's objects, so they need no link to the library. The functions libfabric
//! exports (`fi_getinfo`, `fi_fabric`, ...) are looked up in `libfabric.so.1` with
//! `dlopen` the first time RDMA is used, so fperf starts, and runs TCP and UDP, where
//! libfabric is not installed. `FPERF_LIBFABRIC=/path/to/libfabric.so` loads another
//! copy (and `FPERF_LIBFABRIC=/nonexistent` hides the library, for tests).

/// The generated bindings (C names and all of the headers' items, used or not).
#[allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    dead_code,
    unsafe_op_in_unsafe_fn,
    clippy::all
)]
mod bindings {
    include!(concat!(env!("OUT_DIR"), "/ofi_bindings.rs"));
}
pub use bindings::*;

use std::ffi::{c_char, c_int, CStr};
use std::sync::OnceLock;

/// The API version fperf asks for: Debian 12's libfabric 1.17.
pub const FI_API_VERSION: u32 = (1 << 16) | 17;
/// `FI_ADDR_UNSPEC` (a cast macro bindgen cannot translate).
pub const FI_ADDR_UNSPEC_VALUE: fi_addr_t = u64::MAX;
/// Environment variable naming the libfabric shared object to load.
pub const LIBRARY_ENV: &str = "FPERF_LIBFABRIC";
/// The shared object loaded by default.
pub const DEFAULT_LIBRARY: &str = "libfabric.so.1";

type GetInfoFn = unsafe extern "C" fn(
    u32,
    *const c_char,
    *const c_char,
    u64,
    *const fi_info,
    *mut *mut fi_info,
) -> c_int;
type FreeInfoFn = unsafe extern "C" fn(*mut fi_info);
type DupInfoFn = unsafe extern "C" fn(*const fi_info) -> *mut fi_info;
type FabricFn =
    unsafe extern "C" fn(*mut fi_fabric_attr, *mut *mut fid_fabric, *mut std::ffi::c_void) -> c_int;
type StrErrorFn = unsafe extern "C" fn(c_int) -> *const c_char;

/// The exported libfabric functions fperf calls.
pub struct OfiLib {
    pub getinfo: GetInfoFn,
    pub freeinfo: FreeInfoFn,
    pub dupinfo: DupInfoFn,
    pub fabric: FabricFn,
    strerror: StrErrorFn,
    /// Keeps the functions above mapped for the life of the process.
    _library: libloading::Library,
}

impl OfiLib {
    /// libfabric's text for a (positive or negative) error number.
    pub fn strerror(&self, err: i64) -> String {
        let code = c_int::try_from(err.unsigned_abs()).unwrap_or(c_int::MAX);
        // SAFETY: fi_strerror returns a pointer to a static NUL-terminated string (or
        // NULL, checked) for any integer.
        let p = unsafe { (self.strerror)(code) };
        if p.is_null() {
            return format!("error {code}");
        }
        // SAFETY: non-null, NUL-terminated, static.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

static LIBRARY: OnceLock<Result<OfiLib, String>> = OnceLock::new();

/// libfabric, loaded once per process; the error says what is missing and how to get it.
pub fn lib() -> Result<&'static OfiLib, String> {
    LIBRARY.get_or_init(load).as_ref().map_err(Clone::clone)
}

fn load() -> Result<OfiLib, String> {
    let path = std::env::var_os(LIBRARY_ENV).unwrap_or_else(|| DEFAULT_LIBRARY.into());
    // SAFETY: loading libfabric runs its constructors, which only initialize the
    // library's own state.
    let library = unsafe { libloading::Library::new(&path) }.map_err(|e| {
        format!(
            "--rdma-api ofi needs libfabric, which cannot be loaded here ({e}); install it with `apt-get install libfabric1`"
        )
    })?;
    let missing = |name: &str, e: libloading::Error| {
        format!(
            "{} is not a usable libfabric: {name} is missing ({e}); install libfabric 1.17 or later (`apt-get install libfabric1`)",
            path.to_string_lossy()
        )
    };
    // SAFETY: each symbol is looked up by its documented name and given the C
    // signature from libfabric's headers (fabric.h, fi_errno.h).
    unsafe {
        let getinfo = *library
            .get::<GetInfoFn>(b"fi_getinfo\0")
            .map_err(|e| missing("fi_getinfo", e))?;
        let freeinfo = *library
            .get::<FreeInfoFn>(b"fi_freeinfo\0")
            .map_err(|e| missing("fi_freeinfo", e))?;
        let dupinfo = *library
            .get::<DupInfoFn>(b"fi_dupinfo\0")
            .map_err(|e| missing("fi_dupinfo", e))?;
        let fabric = *library
            .get::<FabricFn>(b"fi_fabric\0")
            .map_err(|e| missing("fi_fabric", e))?;
        let strerror = *library
            .get::<StrErrorFn>(b"fi_strerror\0")
            .map_err(|e| missing("fi_strerror", e))?;
        Ok(OfiLib {
            getinfo,
            freeinfo,
            dupinfo,
            fabric,
            strerror,
            _library: library,
        })
    }
}
