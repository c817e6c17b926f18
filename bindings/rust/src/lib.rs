//! pt2rt for Rust: safe wrappers over libpt2rt's C API (`<pt2rt/pt2rt_c.h>`), no dependencies.
//!
//! ```no_run
//! let options = pt2rt::Options { intra_op_threads: 2, ..Default::default() };
//! let rt = pt2rt::Runtime::load_with_options("model.pt2", &options)?;
//! let x = vec![0f32; 3 * 32 * 32];
//! let outputs = rt.run(&[pt2rt::Input::f32(&x, &[1, 3, 32, 32])])?;
//! let y: &[f32] = outputs[0].as_slice()?;
//! # Ok::<(), pt2rt::Error>(())
//! ```
//!
//! `Runtime::load_from_memory` takes `Options` too (`Runtime::load` is the C API's version-1 load);
//! `Runtime::run_into` writes outputs into buffers the caller reuses.
//!
//! `Runtime` is `Send + Sync` (runs may happen on many threads at once); `Tensor` owns its output and frees it on
//! drop. Errors carry the C status and the library's one-line message. Build with `PT2RT_LIB_DIR` set to a bundle's
//! `lib/` (see build.rs).

use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int, c_void};
use std::fmt;

mod ffi {
    use super::*;

    #[repr(C)]
    pub struct Runtime {
        _private: [u8; 0],
    }
    #[repr(C)]
    pub struct Tensor {
        _private: [u8; 0],
    }
    #[repr(C)]
    pub struct TensorView {
        pub data: *const c_void,
        pub shape: *const i64,
        pub ndim: usize,
        pub dtype: c_int,
    }

    #[repr(C)]
    pub struct Options {
        _private: [u8; 0],
    }
    #[repr(C)]
    pub struct OutputView {
        pub data: *mut c_void,
        pub shape: *const i64,
        pub ndim: usize,
        pub dtype: c_int,
    }

    pub const C_API_VERSION: u32 = 4;

    extern "C" {
        pub fn pt2rt_last_error() -> *const c_char;
        pub fn pt2rt_version() -> *const c_char;
        pub fn pt2rt_check_c_api_version(header_version: u32) -> c_int;
        pub fn pt2rt_dtype_size(dtype: c_int) -> usize;
        pub fn pt2rt_load(
            package_path: *const c_char,
            ops_libraries: *const *const c_char,
            n_ops_libraries: usize,
            num_runners: c_int,
            out: *mut *mut Runtime,
        ) -> c_int;
        pub fn pt2rt_runtime_free(runtime: *mut Runtime);
        pub fn pt2rt_options_create(out: *mut *mut Options) -> c_int;
        pub fn pt2rt_options_free(options: *mut Options);
        pub fn pt2rt_options_set_cpu_isa(options: *mut Options, isa: *const c_char) -> c_int;
        pub fn pt2rt_options_set_num_runners(options: *mut Options, num_runners: c_int) -> c_int;
        pub fn pt2rt_options_add_ops_library(options: *mut Options, path: *const c_char) -> c_int;
        pub fn pt2rt_options_set_ops_from_package_dir(options: *mut Options, enabled: c_int) -> c_int;
        pub fn pt2rt_options_set_check_torch_version(options: *mut Options, enabled: c_int) -> c_int;
        pub fn pt2rt_options_set_check_sha256(options: *mut Options, enabled: c_int) -> c_int;
        pub fn pt2rt_options_set_keep_package_open(options: *mut Options, enabled: c_int) -> c_int;
        pub fn pt2rt_options_set_reuse_run_memory(options: *mut Options, enabled: c_int) -> c_int;
        pub fn pt2rt_options_set_intra_op_threads(options: *mut Options, threads: c_int) -> c_int;
        pub fn pt2rt_options_set_device_index(options: *mut Options, device_index: c_int) -> c_int;
        pub fn pt2rt_options_set_max_record_bytes(options: *mut Options, bytes: u64) -> c_int;
        pub fn pt2rt_options_set_max_metadata_bytes(options: *mut Options, bytes: u64) -> c_int;
        pub fn pt2rt_options_set_max_extracted_bytes(options: *mut Options, bytes: u64) -> c_int;
        pub fn pt2rt_load_with_options(
            package_path: *const c_char,
            options: *const Options,
            out: *mut *mut Runtime,
        ) -> c_int;
        pub fn pt2rt_load_from_memory(
            bytes: *const c_void,
            size: usize,
            options: *const Options,
            out: *mut *mut Runtime,
        ) -> c_int;
        pub fn pt2rt_run_into(
            runtime: *const Runtime,
            inputs: *const TensorView,
            n_inputs: usize,
            outputs: *const OutputView,
            n_outputs: usize,
        ) -> c_int;
        pub fn pt2rt_run(
            runtime: *const Runtime,
            inputs: *const TensorView,
            n_inputs: usize,
            outputs: *mut *mut Tensor,
            outputs_capacity: usize,
            n_outputs: *mut usize,
        ) -> c_int;
        pub fn pt2rt_num_inputs(runtime: *const Runtime) -> usize;
        pub fn pt2rt_num_outputs(runtime: *const Runtime) -> usize;
        pub fn pt2rt_input_spec(
            runtime: *const Runtime,
            index: usize,
            name: *mut *const c_char,
            dtype: *mut c_int,
            shape: *mut *const i64,
            ndim: *mut usize,
        ) -> c_int;
        pub fn pt2rt_tensor_data(tensor: *const Tensor) -> *const c_void;
        pub fn pt2rt_tensor_ndim(tensor: *const Tensor) -> usize;
        pub fn pt2rt_tensor_shape(tensor: *const Tensor) -> *const i64;
        pub fn pt2rt_tensor_dtype(tensor: *const Tensor) -> c_int;
        pub fn pt2rt_tensor_nbytes(tensor: *const Tensor) -> usize;
        pub fn pt2rt_tensor_free(tensor: *mut Tensor);
    }
}

/// The C API's statuses (= pt2run's exit codes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Usage,
    Package,
    OpsLibrary,
    Input,
    Io,
    Runtime,
    Other(i32),
}

impl Status {
    fn from_c(code: c_int) -> Status {
        match code {
            2 => Status::Usage,
            3 => Status::Package,
            4 => Status::OpsLibrary,
            5 => Status::Input,
            6 => Status::Io,
            7 => Status::Runtime,
            other => Status::Other(other),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Error {
    pub status: Status,
    pub message: String,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.status, self.message)
    }
}

impl std::error::Error for Error {}

fn check(code: c_int) -> Result<(), Error> {
    if code == 0 {
        return Ok(());
    }
    // SAFETY: pt2rt_last_error returns a NUL-terminated string owned by this thread's state.
    let message = unsafe { CStr::from_ptr(ffi::pt2rt_last_error()) }.to_string_lossy().into_owned();
    Err(Error { status: Status::from_c(code), message })
}

fn usage(message: String) -> Error {
    Error { status: Status::Usage, message }
}

/// Element types, numbered as `pt2rt_dtype`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DType {
    Float32 = 0,
    Float64 = 1,
    Float16 = 2,
    BFloat16 = 3,
    Int64 = 4,
    Int32 = 5,
    Int16 = 6,
    Int8 = 7,
    UInt8 = 8,
    Bool = 9,
}

impl DType {
    fn from_c(v: c_int) -> Option<DType> {
        use DType::*;
        [Float32, Float64, Float16, BFloat16, Int64, Int32, Int16, Int8, UInt8, Bool].get(v as usize).copied()
    }
    pub fn size(self) -> usize {
        // SAFETY: a valid dtype value.
        unsafe { ffi::pt2rt_dtype_size(self as c_int) }
    }
}

/// Element types a tensor's data can be read as.
pub trait Element: Copy {
    const DTYPE: DType;
}
macro_rules! elements {
    ($($t:ty => $d:ident),*) => { $(impl Element for $t { const DTYPE: DType = DType::$d; })* };
}
elements!(f32 => Float32, f64 => Float64, i64 => Int64, i32 => Int32, i16 => Int16, i8 => Int8, u8 => UInt8,
          bool => Bool);

/// A borrowed input: dense, row-major.
pub struct Input<'a> {
    data: *const c_void,
    bytes: usize,
    shape: &'a [i64],
    dtype: DType,
}

impl<'a> Input<'a> {
    pub fn new<T: Element>(data: &'a [T], shape: &'a [i64]) -> Input<'a> {
        Input { data: data.as_ptr() as *const c_void, bytes: std::mem::size_of_val(data), shape, dtype: T::DTYPE }
    }
    pub fn f32(data: &'a [f32], shape: &'a [i64]) -> Input<'a> {
        Input::new(data, shape)
    }
    /// Raw bytes of any dtype (Float16 / BFloat16 bits, for example).
    pub fn bytes(data: &'a [u8], shape: &'a [i64], dtype: DType) -> Input<'a> {
        Input { data: data.as_ptr() as *const c_void, bytes: data.len(), shape, dtype }
    }
}

/// Caller memory an output is written into by `Runtime::run_into`: dense, row-major, the output's shape.
pub struct Output<'a> {
    data: *mut c_void,
    bytes: usize,
    shape: &'a [i64],
    dtype: DType,
    _borrow: std::marker::PhantomData<&'a mut [u8]>,
}

impl<'a> Output<'a> {
    pub fn new<T: Element>(data: &'a mut [T], shape: &'a [i64]) -> Output<'a> {
        Output {
            data: data.as_mut_ptr() as *mut c_void,
            bytes: std::mem::size_of_val(data),
            shape,
            dtype: T::DTYPE,
            _borrow: std::marker::PhantomData,
        }
    }
    pub fn f32(data: &'a mut [f32], shape: &'a [i64]) -> Output<'a> {
        Output::new(data, shape)
    }
    /// Raw bytes of any dtype.
    pub fn bytes(data: &'a mut [u8], shape: &'a [i64], dtype: DType) -> Output<'a> {
        Output { data: data.as_mut_ptr() as *mut c_void, bytes: data.len(), shape, dtype, _borrow: std::marker::PhantomData }
    }
}

/// How to load a package (the C API's `pt2rt_options`); `Default` is the library's defaults.
#[derive(Debug, Clone)]
pub struct Options {
    /// The CPU variant to load ("avx2", ...); `None`: the best this CPU runs.
    pub cpu_isa: Option<String>,
    /// Model instances for concurrent runs, 1..1024.
    pub num_runners: i32,
    /// Ops libraries to load first; empty: the ones the spec names.
    pub ops_libraries: Vec<String>,
    pub ops_from_package_dir: bool,
    pub check_torch_version: bool,
    pub check_sha256: bool,
    /// Keep the package file (from memory: its golden cases) for the runtime's life.
    pub keep_package_open: bool,
    /// Runs reuse the memory earlier runs freed: `run_into` of fixed shapes allocates nothing once warm.
    pub reuse_run_memory: bool,
    /// Intra-op threads of each run, 1..1024 (0: the process-wide count, `pt2rt_set_num_threads`).
    pub intra_op_threads: i32,
    /// CUDA packages: the device; -1: the current one.
    pub device_index: i32,
    /// Bounds on what a package may make a load read (`None`: the library's).
    pub max_record_bytes: Option<u64>,
    pub max_metadata_bytes: Option<u64>,
    pub max_extracted_bytes: Option<u64>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            cpu_isa: None,
            num_runners: 1,
            ops_libraries: Vec::new(),
            ops_from_package_dir: false,
            check_torch_version: true,
            check_sha256: true,
            keep_package_open: true,
            reuse_run_memory: false,
            intra_op_threads: 0,
            device_index: -1,
            max_record_bytes: None,
            max_metadata_bytes: None,
            max_extracted_bytes: None,
        }
    }
}

/// The C options object for one load, freed on drop.
struct COptions(*mut ffi::Options);

impl Drop for COptions {
    fn drop(&mut self) {
        // SAFETY: created by pt2rt_options_create, freed once.
        unsafe { ffi::pt2rt_options_free(self.0) }
    }
}

fn cstring(what: &str, s: &str) -> Result<CString, Error> {
    CString::new(s).map_err(|_| usage(format!("{what} {s:?} holds a NUL byte")))
}

impl Options {
    fn to_c(&self) -> Result<COptions, Error> {
        check(unsafe { ffi::pt2rt_check_c_api_version(ffi::C_API_VERSION) })?;
        let mut raw = std::ptr::null_mut();
        check(unsafe { ffi::pt2rt_options_create(&mut raw) })?;
        let o = COptions(raw);
        if let Some(isa) = &self.cpu_isa {
            let isa = cstring("cpu_isa", isa)?;
            check(unsafe { ffi::pt2rt_options_set_cpu_isa(o.0, isa.as_ptr()) })?;
        }
        check(unsafe { ffi::pt2rt_options_set_num_runners(o.0, self.num_runners) })?;
        for lib in &self.ops_libraries {
            let lib = cstring("ops library path", lib)?;
            check(unsafe { ffi::pt2rt_options_add_ops_library(o.0, lib.as_ptr()) })?;
        }
        unsafe {
            check(ffi::pt2rt_options_set_ops_from_package_dir(o.0, self.ops_from_package_dir as c_int))?;
            check(ffi::pt2rt_options_set_check_torch_version(o.0, self.check_torch_version as c_int))?;
            check(ffi::pt2rt_options_set_check_sha256(o.0, self.check_sha256 as c_int))?;
            check(ffi::pt2rt_options_set_keep_package_open(o.0, self.keep_package_open as c_int))?;
            check(ffi::pt2rt_options_set_reuse_run_memory(o.0, self.reuse_run_memory as c_int))?;
            check(ffi::pt2rt_options_set_intra_op_threads(o.0, self.intra_op_threads))?;
            check(ffi::pt2rt_options_set_device_index(o.0, self.device_index))?;
            if let Some(b) = self.max_record_bytes {
                check(ffi::pt2rt_options_set_max_record_bytes(o.0, b))?;
            }
            if let Some(b) = self.max_metadata_bytes {
                check(ffi::pt2rt_options_set_max_metadata_bytes(o.0, b))?;
            }
            if let Some(b) = self.max_extracted_bytes {
                check(ffi::pt2rt_options_set_max_extracted_bytes(o.0, b))?;
            }
        }
        Ok(o)
    }
}

/// The number of bytes `shape` of `dtype` takes, if it fits a usize.
fn bytes_for(shape: &[i64], dtype: DType) -> Option<usize> {
    shape
        .iter()
        .try_fold(1usize, |acc, &d| usize::try_from(d).ok().and_then(|d| acc.checked_mul(d)))
        .and_then(|c| c.checked_mul(dtype.size()))
}

/// A package input as its spec describes it (-1 in `shape` for a dynamic dim).
#[derive(Debug, Clone)]
pub struct TensorInfo {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<i64>,
}

/// An owned output, in host memory.
pub struct Tensor(*mut ffi::Tensor);

// SAFETY: outputs are immutable once returned; the C API allows reading them from any thread.
unsafe impl Send for Tensor {}
unsafe impl Sync for Tensor {}

impl Tensor {
    pub fn shape(&self) -> &[i64] {
        // SAFETY: the shape array lives as long as the tensor.
        unsafe { std::slice::from_raw_parts(ffi::pt2rt_tensor_shape(self.0), ffi::pt2rt_tensor_ndim(self.0)) }
    }
    pub fn dtype(&self) -> DType {
        DType::from_c(unsafe { ffi::pt2rt_tensor_dtype(self.0) }).unwrap_or(DType::Float32)
    }
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: nbytes of host memory owned by the tensor.
        unsafe {
            let n = ffi::pt2rt_tensor_nbytes(self.0);
            if n == 0 {
                return &[];
            }
            std::slice::from_raw_parts(ffi::pt2rt_tensor_data(self.0) as *const u8, n)
        }
    }
    /// The data as a slice of T; an error when T is not the tensor's dtype.
    pub fn as_slice<T: Element>(&self) -> Result<&[T], Error> {
        if T::DTYPE != self.dtype() {
            return Err(usage(format!("the tensor is {:?}, not {:?}", self.dtype(), T::DTYPE)));
        }
        let bytes = self.bytes();
        if bytes.is_empty() {
            return Ok(&[]);
        }
        // SAFETY: the runtime's buffers are aligned for their dtype (torch allocations) and hold whole elements.
        Ok(unsafe { std::slice::from_raw_parts(bytes.as_ptr() as *const T, bytes.len() / std::mem::size_of::<T>()) })
    }
}

impl Drop for Tensor {
    fn drop(&mut self) {
        // SAFETY: the tensor is owned and freed once.
        unsafe { ffi::pt2rt_tensor_free(self.0) }
    }
}

/// A loaded package.
pub struct Runtime(*mut ffi::Runtime);

// SAFETY: the C API makes one runtime safe to use from many threads at once.
unsafe impl Send for Runtime {}
unsafe impl Sync for Runtime {}

impl Runtime {
    /// Loads a package. `ops_libraries` empty: the ones its spec names, found as the runtime finds them;
    /// `num_runners` 0: one model instance.
    pub fn load(package_path: &str, ops_libraries: &[&str], num_runners: i32) -> Result<Runtime, Error> {
        check(unsafe { ffi::pt2rt_check_c_api_version(ffi::C_API_VERSION) })?;
        let path = CString::new(package_path).map_err(|_| usage("the package path holds a NUL byte".into()))?;
        let ops: Vec<CString> = ops_libraries
            .iter()
            .map(|s| CString::new(*s).map_err(|_| usage(format!("ops library path {s:?} holds a NUL byte"))))
            .collect::<Result<_, _>>()?;
        let ptrs: Vec<*const c_char> = ops.iter().map(|s| s.as_ptr()).collect();
        let mut out = std::ptr::null_mut();
        check(unsafe { ffi::pt2rt_load(path.as_ptr(), ptrs.as_ptr(), ptrs.len(), num_runners, &mut out) })?;
        Ok(Runtime(out))
    }

    /// Loads a package with options.
    pub fn load_with_options(package_path: &str, options: &Options) -> Result<Runtime, Error> {
        let o = options.to_c()?;
        let path = cstring("the package path", package_path)?;
        let mut out = std::ptr::null_mut();
        check(unsafe { ffi::pt2rt_load_with_options(path.as_ptr(), o.0, &mut out) })?;
        Ok(Runtime(out))
    }

    /// Loads a package held in memory (an asset, a download); `bytes` may be dropped once this returns.
    pub fn load_from_memory(bytes: &[u8], options: &Options) -> Result<Runtime, Error> {
        let o = options.to_c()?;
        let mut out = std::ptr::null_mut();
        check(unsafe { ffi::pt2rt_load_from_memory(bytes.as_ptr() as *const c_void, bytes.len(), o.0, &mut out) })?;
        Ok(Runtime(out))
    }

    pub fn version() -> String {
        unsafe { CStr::from_ptr(ffi::pt2rt_version()) }.to_string_lossy().into_owned()
    }

    pub fn inputs(&self) -> Result<Vec<TensorInfo>, Error> {
        (0..unsafe { ffi::pt2rt_num_inputs(self.0) })
            .map(|i| {
                let (mut name, mut dtype, mut shape, mut ndim) = (std::ptr::null(), 0, std::ptr::null(), 0usize);
                check(unsafe { ffi::pt2rt_input_spec(self.0, i, &mut name, &mut dtype, &mut shape, &mut ndim) })?;
                Ok(TensorInfo {
                    name: unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned(),
                    dtype: DType::from_c(dtype).unwrap_or(DType::Float32),
                    shape: unsafe { std::slice::from_raw_parts(shape, ndim) }.to_vec(),
                })
            })
            .collect()
    }

    pub fn num_outputs(&self) -> usize {
        unsafe { ffi::pt2rt_num_outputs(self.0) }
    }

    fn views(inputs: &[Input<'_>]) -> Result<Vec<ffi::TensorView>, Error> {
        let mut views = Vec::with_capacity(inputs.len());
        for (i, input) in inputs.iter().enumerate() {
            // the runtime checks the shape against the spec; the slice must hold what the shape claims
            if bytes_for(input.shape, input.dtype) != Some(input.bytes) {
                return Err(usage(format!(
                    "input {i}: shape {:?} of {:?} needs a different number of bytes than the {} given",
                    input.shape, input.dtype, input.bytes
                )));
            }
            views.push(ffi::TensorView {
                data: input.data,
                shape: input.shape.as_ptr(),
                ndim: input.shape.len(),
                dtype: input.dtype as c_int,
            });
        }
        Ok(views)
    }

    /// Validates the inputs against the spec and runs the model.
    pub fn run(&self, inputs: &[Input<'_>]) -> Result<Vec<Tensor>, Error> {
        let views = Runtime::views(inputs)?;
        let mut raw = vec![std::ptr::null_mut(); self.num_outputs()];
        let mut n = 0usize;
        check(unsafe { ffi::pt2rt_run(self.0, views.as_ptr(), views.len(), raw.as_mut_ptr(), raw.len(), &mut n) })?;
        Ok(raw.into_iter().take(n).map(Tensor).collect())
    }

    /// Runs the model and writes output i into `outputs[i]` (buffers reused across runs); nothing is written when
    /// an output does not fit its buffer (a Usage error).
    pub fn run_into(&self, inputs: &[Input<'_>], outputs: &mut [Output<'_>]) -> Result<(), Error> {
        let views = Runtime::views(inputs)?;
        let mut targets = Vec::with_capacity(outputs.len());
        for (i, output) in outputs.iter().enumerate() {
            if bytes_for(output.shape, output.dtype) != Some(output.bytes) {
                return Err(usage(format!(
                    "output {i}: shape {:?} of {:?} needs a different number of bytes than the {} given",
                    output.shape, output.dtype, output.bytes
                )));
            }
            targets.push(ffi::OutputView {
                data: output.data,
                shape: output.shape.as_ptr(),
                ndim: output.shape.len(),
                dtype: output.dtype as c_int,
            });
        }
        check(unsafe { ffi::pt2rt_run_into(self.0, views.as_ptr(), views.len(), targets.as_ptr(), targets.len()) })
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        // SAFETY: owned, freed once; no run can be in flight (runs borrow &self).
        unsafe { ffi::pt2rt_runtime_free(self.0) }
    }
}
