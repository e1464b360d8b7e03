//! CUDA runtime: context and stream per device, NVRTC compilation to the device's own
//! machine code (kept on disk between runs: [`kernel_cache`](super::kernel_cache)), and a
//! per-process module cache keyed by (kernel, precision, defines).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, CudaView, CudaViewMut,
    LaunchConfig, PinnedHostSlice,
};
use cudarc::nvrtc::Ptx;

use crate::error::{Error, Result};
use crate::memory::par_copy;
use crate::precision::Precision;

/// A `.cu` file embedded in the binary. `common.cuh` is prepended before compiling.
#[derive(Debug, Clone, Copy)]
pub struct KernelSource {
    pub name: &'static str,
    pub code: &'static str,
}

const COMMON: &str = include_str!("common.cuh");

fn driver_present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: only tries to dlopen the driver library.
    *PRESENT.get_or_init(|| unsafe { cudarc::driver::sys::is_culib_present() })
}

fn nvrtc_present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: only tries to dlopen the NVRTC library.
    *PRESENT.get_or_init(|| unsafe { cudarc::nvrtc::sys::is_culib_present() })
}

/// Number of usable CUDA devices, or why there are none.
pub fn device_count() -> Result<usize> {
    if !driver_present() {
        return Err(Error::NoCudaDevice(
            "the CUDA driver library (libcuda.so) was not found".into(),
        ));
    }
    match CudaContext::device_count() {
        Ok(0) => Err(Error::NoCudaDevice("the driver reports 0 devices".into())),
        Ok(n) => Ok(n as usize),
        Err(e) => Err(Error::NoCudaDevice(format!(
            "driver initialisation failed: {e}"
        ))),
    }
}

/// Kernel experiments without a rebuild (the GPU hosts have no Rust): with
/// `KEISAN_KERNELS_DIR` set, a file there named like the kernel source (e.g.
/// `electrostatics/kernels.cu`) is compiled instead of the embedded one; options in
/// `KEISAN_NVRTC_OPTIONS` (split at whitespace) follow keisan's own, so they win where
/// they repeat one. Either is announced on stderr: results under them are not keisan's.
fn developer_overrides(src: &KernelSource) -> (std::borrow::Cow<'static, str>, Vec<String>) {
    let mut code = std::borrow::Cow::Borrowed(src.code);
    if let Some(dir) = std::env::var_os("KEISAN_KERNELS_DIR") {
        let path = std::path::Path::new(&dir).join(src.name);
        if let Ok(text) = std::fs::read_to_string(&path) {
            crate::say!(
                "keisan: kernel source {} (KEISAN_KERNELS_DIR)",
                path.display()
            );
            code = std::borrow::Cow::Owned(text);
        }
    }
    let extra: Vec<String> = std::env::var("KEISAN_NVRTC_OPTIONS")
        .map(|s| s.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default();
    if !extra.is_empty() {
        crate::say!("keisan: extra NVRTC options {extra:?} (KEISAN_NVRTC_OPTIONS)");
    }
    (code, extra)
}

/// NVRTC's source text and options for one kernel source, precision and architecture.
fn nvrtc_inputs(
    src: &KernelSource,
    precision: Precision,
    arch: &str,
    defines: &[(&str, String)],
) -> (String, Vec<String>) {
    let real = match precision {
        Precision::F32 => "float",
        Precision::F64 => "double",
    };
    let mut options = vec![
        format!("--gpu-architecture={arch}"),
        format!("-Dreal={real}"),
        "--std=c++17".to_string(),
        // No implicit multiply-add contraction: kernels that share a formula then round
        // identically (bit-for-bit tests), and the GPU rounds like the CPU reference.
        // Kernels that want an FMA call fma() explicitly.
        "--fmad=false".to_string(),
        // Lambdas inside kernels are device code (NVRTC compiles device code only).
        "-default-device".to_string(),
    ];
    options.extend(defines.iter().map(|(k, v)| format!("-D{k}={v}")));
    let (code, extra) = developer_overrides(src);
    options.extend(extra);
    (
        format!("{COMMON}\n#line 1 \"{}\"\n{}", src.name, code),
        options,
    )
}

/// What one NVRTC compile gives: for a real architecture (sm_XX), when asked, the machine
/// code (CUBIN), which the driver loads without compiling again; else the PTX.
enum Compiled {
    Cubin(Vec<u8>),
    Ptx(String),
}

/// NVRTC's library, or a clear error where it is missing (cudarc's loader would panic at
/// the first call).
fn require_nvrtc() -> Result<()> {
    if nvrtc_present() {
        return Ok(());
    }
    Err(Error::NoCudaDevice(
        "NVRTC (libnvrtc.so) was not found; install the CUDA toolkit or the \
         nvidia-cuda-nvrtc wheel and add its lib folder to LD_LIBRARY_PATH"
            .into(),
    ))
}

fn nvrtc(
    src: &KernelSource,
    label: &str,
    source: &str,
    options: &[String],
    want_cubin: bool,
) -> Result<Compiled> {
    use cudarc::nvrtc::{result, sys};
    require_nvrtc()?;
    let fail = |log: String| Error::KernelCompile {
        kernel: label.to_string(),
        log,
    };
    let text = std::ffi::CString::new(source).map_err(|e| fail(e.to_string()))?;
    let name = std::ffi::CString::new(src.name).map_err(|e| fail(e.to_string()))?;
    let prog =
        result::create_program(&text, Some(name.as_c_str())).map_err(|e| fail(e.to_string()))?;
    // SAFETY: `prog` comes from create_program and is destroyed once, at the end.
    let out = unsafe {
        let compiled = match result::compile_program(prog, options) {
            Ok(()) => Ok(()),
            Err(e) => Err(fail(match result::get_program_log(prog) {
                Ok(log) => std::ffi::CStr::from_ptr(log.as_ptr())
                    .to_string_lossy()
                    .into_owned(),
                Err(_) => e.to_string(),
            })),
        };
        compiled.and_then(|()| {
            let mut size = 0usize;
            let cubin = (want_cubin
                && sys::nvrtcGetCUBINSize(prog, &mut size).result().is_ok()
                && size > 0)
                .then(|| {
                    let mut bytes = vec![0u8; size];
                    sys::nvrtcGetCUBIN(prog, bytes.as_mut_ptr().cast())
                        .result()
                        .ok()
                        .map(|()| bytes)
                })
                .flatten();
            // No CUBIN (a virtual architecture, an NVRTC without it): the PTX serves.
            match cubin {
                Some(bytes) => Ok(Compiled::Cubin(bytes)),
                None => {
                    let ptx = result::get_ptx(prog).map_err(|e| fail(e.to_string()))?;
                    Ok(Compiled::Ptx(ptx_text(&ptx)))
                }
            }
        })
    };
    // SAFETY: as above; nothing refers to `prog` any more.
    let _ = unsafe { result::destroy_program(prog) };
    out
}

/// Compile one kernel source with NVRTC for `arch` (e.g. "sm_90"): its PTX.
pub fn compile(
    src: &KernelSource,
    precision: Precision,
    arch: &str,
    defines: &[(&str, String)],
) -> Result<Ptx> {
    let (source, options) = nvrtc_inputs(src, precision, arch, defines);
    let label = format!("{} ({precision}, {arch})", src.name);
    match nvrtc(src, &label, &source, &options, false)? {
        Compiled::Ptx(text) => Ok(Ptx::from_src(text)),
        Compiled::Cubin(_) => unreachable!("no machine code was asked for"),
    }
}

/// NVRTC's PTX (NUL-terminated bytes) as text.
fn ptx_text(ptx: &[std::ffi::c_char]) -> String {
    let end = ptx.iter().position(|&c| c == 0).unwrap_or(ptx.len());
    let bytes: Vec<u8> = ptx[..end].iter().map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The image the driver loads for one kernel source on `arch`: machine code from the disk
/// cache in `cache` ([`kernel_cache`](super::kernel_cache)) or from NVRTC (then stored
/// there), or the PTX where NVRTC gives no machine code. `fresh` skips the cache's entry
/// (one the driver refused). Loading PTX instead makes the driver compile it once more,
/// which took most of a test's time on hosts whose driver cache was cold
/// (docs/PERFORMANCE.md).
pub fn compile_image(
    src: &KernelSource,
    precision: Precision,
    arch: &str,
    defines: &[(&str, String)],
    cache: Option<&std::path::Path>,
    fresh: bool,
) -> Result<(Ptx, ImageSource)> {
    require_nvrtc()?;
    let (source, options) = nvrtc_inputs(src, precision, arch, defines);
    let want_cubin = arch.starts_with("sm_") && !ptx_requested()?;
    let cache = cache.filter(|_| want_cubin);
    let key = cache.map(|_| super::kernel_cache::key(nvrtc_version(), arch, &options, &source));
    if let (Some(dir), Some(key), false) = (cache, &key, fresh)
        && let Some(bytes) = super::kernel_cache::load(dir, key)
    {
        return Ok((Ptx::from_binary(bytes), ImageSource::Cache));
    }
    let label = format!("{} ({precision}, {arch})", src.name);
    announce_compile(arch, cache);
    Ok(match nvrtc(src, &label, &source, &options, want_cubin)? {
        Compiled::Cubin(cubin) => {
            if let (Some(dir), Some(key)) = (cache, &key) {
                super::kernel_cache::store(dir, key, &cubin);
            }
            (Ptx::from_binary(cubin), ImageSource::Nvrtc)
        }
        Compiled::Ptx(text) => (Ptx::from_src(text), ImageSource::Ptx),
    })
}

static ANNOUNCE: AtomicBool = AtomicBool::new(false);

/// Say on stderr, once per process, when keisan first compiles kernels (a first run of a
/// variant on a machine pauses for NVRTC, seconds for the larger modules). Off unless the
/// command line turns it on: library users and tests stay silent.
pub fn announce_compiles(on: bool) {
    ANNOUNCE.store(on, Ordering::Relaxed);
}

fn announce_compile(arch: &str, cache: Option<&std::path::Path>) {
    static SAID: AtomicBool = AtomicBool::new(false);
    if ANNOUNCE.load(Ordering::Relaxed) && !SAID.swap(true, Ordering::Relaxed) {
        let why = match cache {
            Some(dir) => format!("once per machine and variant; kept in {}", dir.display()),
            None => "the kernel cache is off: KEISAN_KERNEL_CACHE".to_string(),
        };
        crate::say!("compiling CUDA kernels for {arch} ({why})");
    }
}

/// Where a loaded image came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageSource {
    /// Machine code from the disk cache.
    Cache,
    /// Machine code NVRTC just made.
    Nvrtc,
    /// PTX, which the driver compiles when it loads it.
    Ptx,
}

/// KEISAN_KERNEL_IMAGE=ptx: load PTX as before machine code was loaded (a knob to time
/// the driver's own compile against); `cubin`, the default, NVRTC's machine code.
fn ptx_requested() -> Result<bool> {
    Ok(crate::tuning::either("KEISAN_KERNEL_IMAGE", "cubin", "ptx")?.unwrap_or(false))
}

/// KEISAN_KERNEL_MODULES=whole: compile every kernel of a source into each module, as
/// before modules held only the kernel asked for (a knob to compare the two); `single`,
/// the default, the one kernel.
fn whole_modules() -> Result<bool> {
    Ok(crate::tuning::either("KEISAN_KERNEL_MODULES", "single", "whole")?.unwrap_or(false))
}

/// NVRTC's (major, minor) version, part of every cache key.
fn nvrtc_version() -> (i32, i32) {
    static VERSION: OnceLock<(i32, i32)> = OnceLock::new();
    *VERSION.get_or_init(|| {
        let (mut major, mut minor) = (0, 0);
        // SAFETY: two out-parameters; the caller checked that NVRTC is there.
        let ok = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) }
            .result()
            .is_ok();
        if ok { (major, minor) } else { (0, 0) }
    })
}

/// Let every pair of `gpus` read and write each other's memory directly (NVLink or PCIe),
/// so halo copies between them skip the host. Pairs that cannot still copy, through the
/// host, correctly.
///
/// cudarc allocates from each device's default memory pool (cuMemAllocAsync), which
/// context peer access does not open: kernels on one device that read another's buffers
/// (the iterative solvers' partial sums) also need the owner's pool opened to the reader
/// (cuMemPoolSetAccess). Without that, such reads fault with an illegal address (seen on
/// 2 H200s); a pair whose pool cannot be opened is left out of [`peer_access`], and its
/// sums travel through the host instead.
pub fn enable_peer_access(gpus: &[Arc<Gpu>]) -> Result<()> {
    use cudarc::driver::sys;
    for a in gpus {
        for b in gpus {
            if Arc::ptr_eq(a, b) {
                continue;
            }
            let (reader, owner) = (a.ctx.cu_device(), b.ctx.cu_device());
            let mut can = 0;
            // SAFETY: plain queries, a context flag and a pool's access map; both contexts
            // stay alive.
            unsafe {
                sys::cuDeviceCanAccessPeer(&mut can, reader, owner).result()?;
                if can == 0 {
                    continue;
                }
                a.ctx.bind_to_thread()?;
                let r = sys::cuCtxEnablePeerAccess(b.ctx.cu_ctx(), 0);
                if r != sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED {
                    r.result()?;
                }
                // A pool that cannot be opened leaves the pair out of peer_access.
                let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
                if sys::cuDeviceGetDefaultMemPool(&mut pool, owner)
                    .result()
                    .is_ok()
                {
                    let _ = sys::cuMemPoolSetAccess(
                        pool,
                        &sys::CUmemAccessDesc {
                            location: device_location(reader),
                            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
                        },
                        1,
                    );
                }
            }
        }
    }
    Ok(())
}

fn device_location(ordinal: i32) -> cudarc::driver::sys::CUmemLocation {
    cudarc::driver::sys::CUmemLocation {
        type_: cudarc::driver::sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
        id: ordinal,
    }
}

/// Whether kernels on `a` can read memory `b` allocated: `b`'s default pool (where
/// cudarc allocates) is open to `a` for reading ([`enable_peer_access`] opened every pair
/// that can).
pub fn peer_access(a: &CudaContext, b: &CudaContext) -> Result<bool> {
    use cudarc::driver::sys;
    let (mut can, mut pool) = (0, std::ptr::null_mut());
    let mut flags = sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_NONE;
    let mut at = device_location(a.cu_device());
    // SAFETY: plain queries on two live contexts' devices. A pool query that fails counts
    // as closed: the sums then travel through the host.
    unsafe {
        sys::cuDeviceCanAccessPeer(&mut can, a.cu_device(), b.cu_device()).result()?;
        let opened = can != 0
            && sys::cuDeviceGetDefaultMemPool(&mut pool, b.cu_device())
                .result()
                .is_ok()
            && sys::cuMemPoolGetAccess(&mut flags, pool, &mut at)
                .result()
                .is_ok();
        Ok(opened && flags != sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_NONE)
    }
}

type ModuleKey = (&'static str, Precision, Vec<(String, String)>);

/// Bytes of each of the two page-locked buffers of a large [`Gpu::download`] or
/// [`Gpu::upload`].
pub const STAGE_BYTES: usize = 32 << 20;

/// One CUDA device in use: its context, the stream all of keisan's work goes to, and
/// the modules compiled for it so far.
pub struct Gpu {
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    pub ordinal: usize,
    pub name: String,
    pub compute_capability: (i32, i32),
    pub total_memory: usize,
    pub multiprocessors: usize,
    arch: String,
    modules: Mutex<HashMap<ModuleKey, Arc<CudaModule>>>,
}

/// Host memory registered with the driver ([`Gpu::pin_host`]); unregistered on drop.
pub struct HostPin {
    ptr: *mut u8,
    ctx: Arc<CudaContext>,
}

// SAFETY: the guard only holds the address to unregister; the driver call is thread-safe.
unsafe impl Send for HostPin {}

impl Drop for HostPin {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: registered by `pin_host`; the owner keeps the memory alive till now.
            let _ = unsafe { cudarc::driver::sys::cuMemHostUnregister(self.ptr.cast()) };
        }
    }
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Gpu({}: {})", self.ordinal, self.name)
    }
}

/// What [`Gpu::download`] and [`Gpu::upload`] move through page-locked buffers.
pub trait Staged:
    cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits + Copy + Default + Send + Sync
{
}

impl<T> Staged for T where
    T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits + Copy + Default + Send + Sync
{
}

/// The chunks of `n` values that a staged copy moves, `per` at a time.
fn stage_chunks(n: usize, per: usize) -> Vec<std::ops::Range<usize>> {
    (0..n).step_by(per).map(|a| a..(a + per).min(n)).collect()
}

/// The values a staged copy of `chunk` moves: every copy fills a whole buffer (the
/// driver copies the buffer's length), so the last one ends at the array's end and
/// overlaps the one before.
fn stage_window(chunk: &std::ops::Range<usize>, per: usize) -> std::ops::Range<usize> {
    (chunk.end - per)..chunk.end
}

/// Values of `T` in each of a staged copy's page-locked buffers.
fn stage_len<T>() -> usize {
    (STAGE_BYTES / size_of::<T>().max(1)).max(1)
}

impl Gpu {
    pub fn open(ordinal: usize) -> Result<Arc<Gpu>> {
        let count = device_count()?;
        if ordinal >= count {
            return Err(Error::invalid(
                "--device",
                ordinal,
                format!(
                    "this machine has {count} CUDA device(s): use 0..{}",
                    count - 1
                ),
            ));
        }
        let ctx = CudaContext::new(ordinal)?;
        // One stream, ordered by construction: cudarc's per-buffer event tracking
        // would only add work to every launch.
        // SAFETY: keisan issues all work of a context on its single stream.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream()?;
        let (major, minor) = ctx.compute_capability()?;
        let multiprocessors = ctx.attribute(
            cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
        )? as usize;
        Ok(Arc::new(Gpu {
            name: ctx.name()?,
            total_memory: ctx.total_mem()?,
            compute_capability: (major, minor),
            multiprocessors,
            arch: format!("sm_{major}{minor}"),
            ordinal,
            ctx,
            stream,
            modules: Mutex::new(HashMap::new()),
        }))
    }

    pub fn arch(&self) -> &str {
        &self.arch
    }

    pub fn free_memory(&self) -> Result<usize> {
        Ok(self.ctx.mem_get_info()?.0)
    }

    /// Refuse early, with a message that names the sizes, when `bytes` will not fit.
    pub fn ensure_fits(&self, bytes: u128, what: &str) -> Result<()> {
        let free = self.free_memory()? as u128;
        if bytes > free {
            return Err(Error::OutOfMemory(format!(
                "{what} needs {} on the device, but {} (device {}) has {} free; \
                 use a smaller grid or --backend cpu",
                crate::units::bytes(bytes),
                self.name,
                self.ordinal,
                crate::units::bytes(free),
            )));
        }
        Ok(())
    }

    /// The function `name` from `src`, compiling the module on first use.
    pub fn function(
        &self,
        src: &KernelSource,
        precision: Precision,
        defines: &[(&str, String)],
        name: &str,
    ) -> Result<CudaFunction> {
        // Only the kernel asked for (each kernel in the .cu files sits inside
        // `#if !defined(KEISAN_ONLY) || defined(KEISAN_WANT_<name>)`): NVRTC then spends
        // nothing on the module's other kernels (advection/kernels.cu's adv_pass_w: 0.35
        // against 3.05 s), and a kernel's machine code is its own module's.
        let want = format!("KEISAN_WANT_{name}");
        let mut defines = defines.to_vec();
        if !whole_modules()? {
            defines.push(("KEISAN_ONLY", "1".to_string()));
            defines.push((&want, "1".to_string()));
        }
        let defines = defines.as_slice();
        let key: ModuleKey = (
            src.name,
            precision,
            defines
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        );
        let module = {
            let mut cache = self.modules.lock().expect("module cache poisoned");
            match cache.get(&key) {
                Some(m) => m.clone(),
                None => {
                    let dir = super::kernel_cache::dir();
                    let (arch, dir) = (&self.arch, dir.as_deref());
                    let (image, from) = compile_image(src, precision, arch, defines, dir, false)?;
                    let module = match self.ctx.load_module(image) {
                        // An entry the driver refuses (damaged on disk): compile afresh.
                        Err(_) if from == ImageSource::Cache => {
                            let (image, _) =
                                compile_image(src, precision, arch, defines, dir, true)?;
                            self.ctx.load_module(image)?
                        }
                        other => other?,
                    };
                    cache.insert(key, module.clone());
                    module
                }
            }
        };
        let function = module.load_function(name)?;
        // KEISAN_CARVEOUT=P: the share of each multiprocessor's unified L1/shared memory
        // that kernels prefer as shared memory, in percent (a tuning knob; unset: the
        // driver's choice).
        if let Some(percent) = crate::tuning::number("KEISAN_CARVEOUT", 0i32..=100)? {
            use cudarc::driver::sys::CUfunction_attribute_enum as A;
            function.set_attribute(
                A::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                percent,
            )?;
        }
        Ok(function)
    }

    /// Page-lock `bytes` of host memory at `ptr` so the device's copy engines read and
    /// write it directly; undone when the returned guard drops.
    ///
    /// # Safety
    /// The memory must stay allocated until the guard drops.
    pub unsafe fn pin_host(&self, ptr: *mut u8, bytes: usize) -> Result<HostPin> {
        use cudarc::driver::sys;
        self.ctx.bind_to_thread()?;
        // SAFETY: the caller keeps the memory alive while it is registered.
        unsafe { sys::cuMemHostRegister_v2(ptr.cast(), bytes, 0) }.result()?;
        Ok(HostPin {
            ptr,
            ctx: self.ctx.clone(),
        })
    }

    /// `src` on the host. Arrays past [`STAGE_BYTES`] come through two page-locked
    /// buffers in turn, all threads moving one chunk out while the next comes in: the
    /// driver's copies into pageable memory ran at about 1.3 GB/s on the H200 hosts (a
    /// 512³ f32 field in 0.4 s).
    pub fn download<T: Staged>(&self, src: &CudaView<'_, T>) -> Result<Vec<T>> {
        let (n, per) = (src.len(), stage_len::<T>());
        if n == 0 {
            return Ok(Vec::new());
        }
        if n <= per {
            return Ok(self.stream.clone_dtoh(src)?);
        }
        let mut stage = self.stage::<T>(per)?;
        let mut out = vec![T::default(); n];
        // The copy of chunk c into its buffer, and an event after it: keisan turns
        // cudarc's event tracking off, so the buffers' own events are never recorded.
        let copy = |c: &std::ops::Range<usize>, buf: &mut PinnedHostSlice<T>| {
            self.stream
                .memcpy_dtoh(&src.slice(stage_window(c, per)), buf)?;
            Ok::<_, Error>(self.stream.record_event(None)?)
        };
        let chunks = stage_chunks(n, per);
        let mut copies = || {
            let mut done = [Some(copy(&chunks[0], &mut stage[0])?), None];
            for (c, chunk) in chunks.iter().enumerate() {
                if let Some(next) = chunks.get(c + 1) {
                    done[(c + 1) % 2] = Some(copy(next, &mut stage[(c + 1) % 2])?);
                }
                if let Some(event) = done[c % 2].take() {
                    event.synchronize()?;
                }
                let from = &stage[c % 2].as_slice()?[per - chunk.len()..];
                par_copy(&mut out[chunk.clone()], from);
            }
            Ok(())
        };
        self.drained(copies())?;
        Ok(out)
    }

    /// A device copy of `src`. Arrays past [`STAGE_BYTES`] go through two page-locked
    /// buffers in turn, all threads filling one while the other's copy runs: the
    /// driver's copies from pageable memory ran at about 5 GB/s on the H200 hosts.
    pub fn upload<T: Staged>(&self, src: &[T]) -> Result<CudaSlice<T>> {
        // SAFETY: every value is written below before any kernel can read it.
        let mut dst = unsafe { self.stream.alloc::<T>(src.len()) }?;
        self.upload_into(src, &mut dst.as_view_mut())?;
        Ok(dst)
    }

    /// `src` into the front of `dst` (at least as long), as [`Gpu::upload`] copies it.
    pub fn upload_into<T: Staged>(&self, src: &[T], dst: &mut CudaViewMut<'_, T>) -> Result<()> {
        let (n, per) = (src.len(), stage_len::<T>());
        if n <= per {
            self.stream.memcpy_htod(src, &mut dst.slice_mut(0..n))?;
            return Ok(());
        }
        let mut stage = self.stage::<T>(per)?;
        let mut copies = || {
            let mut done: [Option<cudarc::driver::CudaEvent>; 2] = [None, None];
            for (c, chunk) in stage_chunks(n, per).iter().enumerate() {
                let window = stage_window(chunk, per);
                // The copy out of this buffer two chunks ago must be over before it is
                // filled again.
                if let Some(event) = done[c % 2].take() {
                    event.synchronize()?;
                }
                par_copy(stage[c % 2].as_mut_slice()?, &src[window.clone()]);
                self.stream
                    .memcpy_htod(&stage[c % 2], &mut dst.slice_mut(window))?;
                done[c % 2] = Some(self.stream.record_event(None)?);
            }
            for event in done.into_iter().flatten() {
                event.synchronize()?;
            }
            Ok(())
        };
        self.drained(copies())
    }

    /// `result`, after the stream's work is over if it is an error: the staged copies'
    /// page-locked buffers are freed on return, and no copy may still be using them.
    fn drained<R>(&self, result: Result<R>) -> Result<R> {
        if result.is_err() {
            let _ = self.stream.synchronize();
        }
        result
    }

    /// Two page-locked buffers of `per` values for the staged copies.
    fn stage<T: Staged>(&self, per: usize) -> Result<[PinnedHostSlice<T>; 2]> {
        // SAFETY: page-locked buffers of plain values, each read only after the event
        // that follows its copy in, and written only after the event that follows its
        // copy out.
        let alloc = || unsafe { self.ctx.alloc_pinned_with_flags::<T>(per, 0) };
        Ok([alloc()?, alloc()?])
    }

    /// Entries `from..to` of a device ring of values (slot k % len), e.g. the residual
    /// history an iterative kernel fills; empty without a copy when `from >= to`.
    pub fn ring_range(
        &self,
        ring: &cudarc::driver::CudaSlice<f64>,
        from: u64,
        to: u64,
    ) -> Result<Vec<f64>> {
        if from >= to {
            return Ok(Vec::new());
        }
        let all = self.stream.clone_dtoh(ring)?;
        Ok((from..to).map(|k| all[k as usize % all.len()]).collect())
    }

    /// A CUDA event that records time.
    pub fn timing_event(&self) -> Result<cudarc::driver::CudaEvent> {
        Ok(self
            .ctx
            .new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))?)
    }

    /// Blocks of `threads` enough to cover `items` with a grid-stride loop, capped at a
    /// few waves of the device.
    pub fn stride_config(&self, items: usize, threads: u32) -> LaunchConfig {
        let wanted = items.div_ceil(threads as usize).max(1);
        let cap = self.multiprocessors * 8;
        LaunchConfig {
            grid_dim: (wanted.min(cap) as u32, 1, 1),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: 0,
        }
    }
}

/// Shared memory a block may hold without opting in (48 KiB).
pub const STATIC_SHARED: usize = 48 << 10;

/// Shared memory a block may opt in to on sm_90 (227 KiB).
pub const MAX_DYNAMIC_SHARED: usize = 227 << 10;

/// Let `function` take `bytes` of dynamic shared memory (above the default 48 KiB).
pub fn allow_shared(function: &CudaFunction, bytes: usize) -> Result<()> {
    if bytes > STATIC_SHARED {
        use cudarc::driver::sys::CUfunction_attribute_enum as A;
        function.set_attribute(
            A::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            bytes as i32,
        )?;
    }
    Ok(())
}

/// A TMA tensor map (the driver's `CUtensorMap`) as a kernel argument: common.cuh's
/// `tensor_map`, taken by the kernel as a `__grid_constant__` parameter.
#[repr(transparent)]
#[derive(Clone, Copy)]
pub struct TensorMap(cudarc::driver::sys::CUtensorMap);

// SAFETY: plain bytes the driver copies into the kernel's parameter space.
unsafe impl cudarc::driver::DeviceRepr for TensorMap {}

/// The 2-D tensor map of `dims` reals of `precision` (x fastest) from device address
/// `base` (16-byte aligned), rows `stride` bytes apart (a multiple of 16), read in boxes of
/// `boxed` reals (x · the real's bytes a multiple of 16, each at most 256). A box at
/// coordinates partly outside `dims` (negative ones too) reads zeros there, and nothing
/// outside. A tensor map holds the address: one made for an allocation is valid while it
/// lives.
pub fn tensor_map_2d(
    base: u64,
    precision: Precision,
    dims: [u64; 2],
    stride: u64,
    boxed: [u32; 2],
) -> Result<TensorMap> {
    use cudarc::driver::sys;
    let data = match precision {
        Precision::F32 => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
        Precision::F64 => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT64,
    };
    let mut map = std::mem::MaybeUninit::<sys::CUtensorMap>::zeroed();
    // SAFETY: the arrays hold the rank's entries; the driver only encodes the map (it
    // checks alignment and limits and reports them as an error).
    unsafe {
        sys::cuTensorMapEncodeTiled(
            map.as_mut_ptr(),
            data,
            2,
            base as *mut std::ffi::c_void,
            dims.as_ptr(),
            [stride].as_ptr(),
            boxed.as_ptr(),
            [1u32; 2].as_ptr(),
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_NONE,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
        .result()?;
        Ok(TensorMap(map.assume_init()))
    }
}

/// A kernel's arguments by value (each at most 8 bytes), for launches cudarc's builder
/// cannot make ([`launch_with_args`]).
#[derive(Default)]
pub struct KernelArgs(Vec<u64>);

impl KernelArgs {
    /// `v` as the next argument.
    pub fn value<T: cudarc::driver::DeviceRepr + Copy>(&mut self, v: &T) -> &mut Self {
        let n = std::mem::size_of::<T>();
        assert!(n <= 8, "kernel arguments of at most 8 bytes");
        let mut x = 0u64;
        // SAFETY: n <= 8 bytes of a Copy value into the first bytes of x; the driver reads
        // the parameter's own size from the start of the pointed-to value.
        unsafe {
            std::ptr::copy_nonoverlapping(
                v as *const T as *const u8,
                &mut x as *mut u64 as *mut u8,
                n,
            )
        };
        self.0.push(x);
        self
    }

    /// The device address of `s` as the next argument. cudarc's guard, which would record
    /// the access on `s`'s events, is dropped here, before the launch: keisan's contexts
    /// track no events ([`Gpu::open`] turns that off; all work of a context is on one stream).
    pub fn slice<T>(&mut self, s: &cudarc::driver::CudaSlice<T>, stream: &CudaStream) -> &mut Self {
        use cudarc::driver::DevicePtr;
        let (p, _sync) = s.device_ptr(stream);
        self.value(&p)
    }
}

/// Launch `f` on `stream`; `programmatic`: as a programmatic dependent launch (sm_90),
/// whose blocks may be scheduled while the stream's previous kernel drains, once every
/// block of that kernel has run `griddepcontrol.launch_dependents` or exited. `f` must
/// then run `griddepcontrol.wait` (which returns once the previous kernel is complete and
/// its writes are visible) before it touches anything that kernel writes.
///
/// # Safety
/// `args` are `f`'s parameters in order, of their types; the buffers they point to stay
/// alive until the kernel completes.
pub unsafe fn launch_with_args(
    stream: &CudaStream,
    f: &CudaFunction,
    cfg: LaunchConfig,
    args: &KernelArgs,
    programmatic: bool,
) -> Result<()> {
    use cudarc::driver::sys;
    // SAFETY: a zeroed attribute is valid; the union's field for this id is set below.
    let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    let config = sys::CUlaunchConfig {
        gridDimX: cfg.grid_dim.0,
        gridDimY: cfg.grid_dim.1,
        gridDimZ: cfg.grid_dim.2,
        blockDimX: cfg.block_dim.0,
        blockDimY: cfg.block_dim.1,
        blockDimZ: cfg.block_dim.2,
        sharedMemBytes: cfg.shared_mem_bytes,
        hStream: stream.cu_stream(),
        attrs: &mut attr,
        numAttrs: programmatic as u32,
    };
    let mut params: Vec<*mut std::ffi::c_void> =
        args.0.iter().map(|x| x as *const u64 as *mut _).collect();
    stream.context().bind_to_thread()?;
    // SAFETY: the caller's contract; the parameter pointers live until the call returns
    // (the driver copies the values at launch).
    unsafe {
        sys::cuLaunchKernelEx(
            &config,
            f.cu_function(),
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
        .result()?
    };
    Ok(())
}
