//! Probe for issue 11: red-black SOR with per-node stencil ids and a coefficient table,
//! temporally blocked (kernels.cu). Checks the blocked pass against one-colour half-steps
//! bit for bit, then times it at n³ f32 beside the device's copy bandwidth.
//!
//! es-table-tb [n] [iterations] [config ...], config = T,R,W,V,CONTRACT,chunk
//! (levels = half-steps per pass, rows per thread, warps, values per lane, fma or not,
//! planes per block).

use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DeviceRepr, LaunchConfig, PushKernelArg,
    ValidAsZeroBits,
};
use cudarc::nvrtc::{CompileOptions, compile_ptx_with_opts};
use std::sync::Arc;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const SRC: &str = include_str!("../kernels.cu");
/// keisan's own es_blocked (its engine's kernel), to time it in this harness.
const COMMON: &str = include_str!("../../../src/device/common.cuh");
const ES: &str = include_str!("../../../src/solvers/electrostatics/kernels.cu");
const OMEGA: f64 = 1.98;

struct Problem {
    nx: usize,
    ny: usize,
    nz: usize,
    ids: Vec<u8>,
    table: Vec<f64>,
    v0: Vec<f64>,
    distinct: usize,
}

/// The bench's kind of geometry: a dielectric slab (εr 4) across z, a sphere (εr 10), two
/// electrode plates (1 V and 0 V), the box's faces held at 0.
fn problem(nx: usize, ny: usize, nz: usize, random_start: bool) -> Res<Problem> {
    let eps = [1.0f64, 4.0, 10.0];
    let n = nx * ny * nz;
    let mut class = vec![0u8; n];
    let mut held = vec![false; n];
    let mut v0 = vec![0f64; n];
    let (cx, cy, cz) = (nx as f64 / 2.0, ny as f64 / 2.0, nz as f64 / 2.0);
    let rad = 0.18 * nx.min(ny).min(nz) as f64;
    let mut seed = 12345u64;
    for z in 0..nz {
        for y in 0..ny {
            for x in 0..nx {
                let i = (z * ny + y) * nx + x;
                let fz = z as f64 / nz as f64;
                if (0.35..0.65).contains(&fz) {
                    class[i] = 1;
                }
                let d2 =
                    (x as f64 - cx).powi(2) + (y as f64 - cy).powi(2) + (z as f64 - cz).powi(2);
                if d2 < rad * rad {
                    class[i] = 2;
                }
                let face = x == 0 || y == 0 || z == 0 || x == nx - 1 || y == ny - 1 || z == nz - 1;
                let fx = x as f64 / nx as f64;
                let fy = y as f64 / ny as f64;
                let plate = (0.2..0.8).contains(&fx) && (0.2..0.8).contains(&fy);
                let za = (0.2 * nz as f64) as usize;
                let zb = (0.8 * nz as f64) as usize;
                if face {
                    held[i] = true;
                } else if plate && (z == za || z == za + 1) {
                    held[i] = true;
                    v0[i] = 1.0;
                    class[i] = 0;
                } else if plate && (z == zb || z == zb + 1) {
                    held[i] = true;
                    class[i] = 0;
                }
                if random_start && !held[i] {
                    seed = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    v0[i] = ((seed >> 40) as f64) / (1u64 << 24) as f64;
                }
            }
        }
    }
    let mut ids = vec![0u8; n];
    let mut table = vec![0f64; 512 * 4];
    table[7] = 1.0; // id 0: held (A = B = 0, O = 1)
    let mut key_id = std::collections::HashMap::new();
    let om = OMEGA;
    for z in 1..nz - 1 {
        for y in 1..ny - 1 {
            for x in 1..nx - 1 {
                let i = (z * ny + y) * nx + x;
                if held[i] {
                    continue;
                }
                let nb = [i - 1, i + 1, i - nx, i + nx, i - nx * ny, i + nx * ny];
                let mut key = class[i] as u32;
                for &j in &nb {
                    key = key * 3 + class[j] as u32;
                }
                let next = key_id.len() + 1;
                let id = *key_id.entry(key).or_insert(next);
                if id > 255 {
                    return Err(format!("more than 255 stencils ({id})").into());
                }
                ids[i] = id as u8;
                if id == next {
                    let e = eps[class[i] as usize];
                    let c: Vec<f64> = nb
                        .iter()
                        .map(|&j| 0.5 * (e + eps[class[j] as usize]))
                        .collect();
                    let den: f64 = c.iter().sum();
                    let t = &mut table[8 * id..8 * id + 8];
                    for f in 0..6 {
                        t[f] = om * c[f] / den;
                    }
                    t[6] = 0.0;
                    t[7] = 1.0 - om;
                }
            }
        }
    }
    Ok(Problem {
        nx,
        ny,
        nz,
        ids,
        table,
        v0,
        distinct: key_id.len(),
    })
}

struct Dev {
    stream: Arc<CudaStream>,
    ctx: Arc<CudaContext>,
}

fn compile(dev: &Dev, defines: &[(&str, String)]) -> Res<Arc<cudarc::driver::CudaModule>> {
    let mut options: Vec<String> = defines.iter().map(|(k, v)| format!("-D{k}={v}")).collect();
    options.push("--std=c++17".into());
    options.push("-default-device".into());
    let opts = CompileOptions {
        arch: Some("sm_90"),
        fmad: Some(false),
        options,
        ..Default::default()
    };
    let ptx = compile_ptx_with_opts(SRC, opts).map_err(|e| format!("{e:?}"))?;
    Ok(dev.ctx.load_module(ptx)?)
}

struct Cfg {
    t: usize,
    r: usize,
    w: usize,
    v: usize,
    contract: usize,
    chunk: usize,
    real: usize,
    idb: usize,
    sums: usize,
}

impl Cfg {
    fn parse(s: &str) -> Res<Cfg> {
        let mut f: Vec<usize> = s.split(',').map(|x| x.parse()).collect::<Result<_, _>>()?;
        let defaults = [4, 4, 12, 2, 1, 64, 32, 8, 0];
        while f.len() < defaults.len() {
            f.push(defaults[f.len()]);
        }
        Ok(Cfg {
            t: f[0],
            r: f[1],
            w: f[2],
            v: f[3],
            contract: f[4],
            chunk: f[5],
            real: f[6],
            idb: f[7],
            sums: f[8],
        })
    }
    fn defines(&self) -> Vec<(&'static str, String)> {
        vec![
            ("TB_T", self.t.to_string()),
            ("TB_R", self.r.to_string()),
            ("TB_W", self.w.to_string()),
            ("TB_V", self.v.to_string()),
            ("CONTRACT", self.contract.to_string()),
            (
                "REAL",
                if self.real == 64 { "double" } else { "float" }.to_string(),
            ),
            ("IDB", self.idb.to_string()),
            ("SUMS", self.sums.to_string()),
        ]
    }
    fn smem(&self, ntable: usize) -> usize {
        let b = self.real / 8;
        2 * self.t * self.w * 64 * self.v * b + ntable * 8 * b
    }
    fn grid(&self, p: &Problem) -> LaunchConfig {
        let hx = self.t.div_ceil(self.v) * self.v;
        let txo = 32 * self.v - 2 * hx;
        let tyo = self.w * self.r - 2 * self.t;
        LaunchConfig {
            grid_dim: (
                p.nx.div_ceil(txo) as u32,
                p.ny.div_ceil(tyo) as u32,
                p.nz.div_ceil(self.chunk) as u32,
            ),
            block_dim: (32, self.w as u32, 1),
            shared_mem_bytes: self.smem(p.distinct + 1) as u32,
        }
    }
    fn label(&self) -> String {
        format!(
            "T={} R={} W={} V={} fma={} chunk={} f{} ids{} sums={}",
            self.t,
            self.r,
            self.w,
            self.v,
            self.contract,
            self.chunk,
            self.real,
            self.idb,
            self.sums
        )
    }
}

trait Real: DeviceRepr + ValidAsZeroBits + Copy + PartialEq + Default + 'static {
    fn of(x: f64) -> Self;
    fn bits(self) -> u64;
    fn f(self) -> f64;
}
impl Real for f32 {
    fn of(x: f64) -> Self {
        x as f32
    }
    fn bits(self) -> u64 {
        self.to_bits() as u64
    }
    fn f(self) -> f64 {
        self as f64
    }
}
impl Real for f64 {
    fn of(x: f64) -> Self {
        x
    }
    fn bits(self) -> u64 {
        self.to_bits()
    }
    fn f(self) -> f64 {
        self
    }
}
trait Id: DeviceRepr + ValidAsZeroBits + Copy + 'static {
    fn of(x: u8) -> Self;
}
impl Id for u8 {
    fn of(x: u8) -> Self {
        x
    }
}
impl Id for u16 {
    fn of(x: u8) -> Self {
        x as u16
    }
}

struct Bufs<T, I> {
    a: CudaSlice<T>,
    b: CudaSlice<T>,
    ids: CudaSlice<I>,
    table: CudaSlice<T>,
}

fn upload<T: Real, I: Id>(dev: &Dev, p: &Problem) -> Res<Bufs<T, I>> {
    let v: Vec<T> = p.v0.iter().map(|&x| T::of(x)).collect();
    let ids: Vec<I> = p.ids.iter().map(|&x| I::of(x)).collect();
    let table: Vec<T> = p.table.iter().map(|&x| T::of(x)).collect();
    Ok(Bufs {
        a: dev.stream.clone_htod(&v)?,
        b: dev.stream.clone_htod(&v)?,
        ids: dev.stream.clone_htod(&ids)?,
        table: dev.stream.clone_htod(&table)?,
    })
}

fn half_steps<T: Real, I: Id>(
    dev: &Dev,
    f: &CudaFunction,
    p: &Problem,
    b: &mut Bufs<T, I>,
    n: usize,
) -> Res<()> {
    let cfg = LaunchConfig {
        grid_dim: (p.nx.div_ceil(128) as u32, p.ny as u32, p.nz as u32),
        block_dim: (128, 1, 1),
        shared_mem_bytes: 0,
    };
    let (nz, ny, nx) = (p.nz as i32, p.ny as i32, p.nx as i32);
    for s in 0..n {
        let colour = (s % 2) as i32;
        let mut l = dev.stream.launch_builder(f);
        l.arg(&mut b.a)
            .arg(&b.ids)
            .arg(&b.table)
            .arg(&nz)
            .arg(&ny)
            .arg(&nx)
            .arg(&colour);
        unsafe { l.launch(cfg) }?;
    }
    Ok(())
}

/// `n` blocked passes; the result ends in b.a.
#[allow(clippy::too_many_arguments)]
fn passes<T: Real, I: Id>(
    dev: &Dev,
    f: &CudaFunction,
    c: &Cfg,
    p: &Problem,
    b: &mut Bufs<T, I>,
    sums: &mut CudaSlice<f64>,
    n: usize,
) -> Res<()> {
    let cfg = c.grid(p);
    let (nz, ny, nx, chunk) = (p.nz as i32, p.ny as i32, p.nx as i32, c.chunk as i32);
    let ntable = (p.distinct + 1) as i32;
    for _ in 0..n {
        let mut l = dev.stream.launch_builder(f);
        l.arg(&b.a)
            .arg(&mut b.b)
            .arg(&b.ids)
            .arg(&b.table)
            .arg(&ntable);
        l.arg(&nz).arg(&ny).arg(&nx).arg(&chunk).arg(&mut *sums);
        unsafe { l.launch(cfg) }?;
        std::mem::swap(&mut b.a, &mut b.b);
    }
    Ok(())
}

fn timed(dev: &Dev, mut work: impl FnMut() -> Res<()>) -> Res<f64> {
    let e0 = dev
        .stream
        .record_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))?;
    work()?;
    let e1 = dev
        .stream
        .record_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))?;
    e1.synchronize()?;
    Ok(e0.elapsed_ms(&e1)? as f64 * 1e-3)
}

fn compare<T: Real>(dev: &Dev, x: &CudaSlice<T>, y: &CudaSlice<T>) -> Res<(usize, f64)> {
    let a = dev.stream.clone_dtoh(x)?;
    let b = dev.stream.clone_dtoh(y)?;
    let mut diff = 0;
    let mut worst = 0f64;
    for (p, q) in a.iter().zip(&b) {
        if p.bits() != q.bits() {
            diff += 1;
            worst = worst.max((p.f() - q.f()).abs());
        }
    }
    Ok((diff, worst))
}

fn run<T: Real, I: Id>(
    dev: &Dev,
    c: &Cfg,
    small: &Problem,
    big: &Problem,
    iters: usize,
    bw: f64,
) -> Res<()> {
    let m = compile(dev, &c.defines())?;
    let half = m.load_function("rb_half")?;
    let tb = m.load_function("rb_tb")?;
    use cudarc::driver::sys::CUfunction_attribute_enum as A;
    let smem = c.smem(small.distinct.max(big.distinct) + 1);
    tb.set_attribute(
        A::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
        smem as i32,
    )?;
    let regs = tb.get_attribute(A::CU_FUNC_ATTRIBUTE_NUM_REGS)?;
    let local = tb.get_attribute(A::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)?;
    println!(
        "{}: {regs} registers, {local} B local, {smem} B shared",
        c.label()
    );
    let mut sums = dev.stream.alloc_zeros::<f64>(2)?;
    for (name, p, np) in [("small", small, 3usize), ("big", big, 2)] {
        let mut x = upload::<T, I>(dev, p)?;
        let mut y = upload::<T, I>(dev, p)?;
        half_steps(dev, &half, p, &mut x, np * c.t)?;
        passes(dev, &tb, c, p, &mut y, &mut sums, np)?;
        let (diff, worst) = compare(dev, &x.a, &y.a)?;
        println!(
            "  {name}: {np} passes vs {} half-steps: {diff} values differ (max {worst:e})",
            np * c.t
        );
    }
    let mut y = upload::<T, I>(dev, big)?;
    passes(dev, &tb, c, big, &mut y, &mut sums, 4)?;
    let np = 2 * iters / c.t;
    let mut best = f64::MAX;
    for _ in 0..2 {
        let t = timed(dev, || passes(dev, &tb, c, big, &mut y, &mut sums, np))?;
        best = best.min(t);
    }
    let per = best / (np * c.t / 2) as f64;
    let nodes = (big.nx * big.ny * big.nz) as f64;
    let bytes = (2.0 * (c.real / 8) as f64 + (c.idb / 8) as f64) / (c.t as f64 / 2.0);
    println!(
        "  {}³: {np} passes ({} iterations), best of 2: {:.1} µs per iteration, {:.1} Gnode/s, {:.1} % of the copy rate for its {:.2} B/node",
        big.nx,
        np * c.t / 2,
        per * 1e6,
        nodes / per * 1e-9,
        100.0 * bytes * nodes / per / bw,
        bytes
    );
    Ok(())
}

/// keisan's es_blocked (f32, 2 iterations a pass) on `p`, 1000 iterations: µs per iteration.
fn engine_kernel(dev: &Dev, p: &Problem, chunk: usize) -> Res<f64> {
    let es = match std::env::var("ES_SRC") {
        Ok(path) => std::fs::read_to_string(path)?,
        Err(_) => ES.to_string(),
    };
    let src = format!("{COMMON}\n#line 1 \"es\"\n{es}");
    let mut options: Vec<String> = [
        "-Dreal=float",
        "-DKEISAN_ONLY=1",
        "-DKEISAN_WANT_es_blocked=1",
        "-DES_TB_T=4",
        "-DES_TB_R=4",
        "-DES_TB_W=12",
        "--std=c++17",
        "-default-device",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    options.extend(
        std::env::var("ES_OPTS")
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_string),
    );
    let opts = CompileOptions {
        arch: Some("sm_90"),
        fmad: Some(false),
        options,
        ..Default::default()
    };
    let ptx = compile_ptx_with_opts(src, opts).map_err(|e| format!("{e:?}"))?;
    let m = dev.ctx.load_module(ptx)?;
    let f = m.load_function("es_blocked")?;
    let ntable = p.distinct + 1;
    let smem = (2 * 4 * 12 * 64 * 2 + ntable * 8) * 4;
    use cudarc::driver::sys::CUfunction_attribute_enum as A;
    f.set_attribute(
        A::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
        smem as i32,
    )?;
    let mut b = upload::<f32, u16>(dev, p)?;
    let cfg = LaunchConfig {
        grid_dim: (
            p.nx.div_ceil(56) as u32,
            p.ny.div_ceil(40) as u32,
            p.nz.div_ceil(chunk) as u32,
        ),
        block_dim: (32, 12, 1),
        shared_mem_bytes: smem as u32,
    };
    let blocks = (cfg.grid_dim.0 * cfg.grid_dim.1 * cfg.grid_dim.2) as usize;
    let mut partials = dev.stream.alloc_zeros::<f64>(4 * blocks)?;
    let mut ticket = dev.stream.alloc_zeros::<u32>(1)?;
    let mut ctl = dev.stream.alloc_zeros::<u64>(3)?;
    let mut hist = dev.stream.alloc_zeros::<f64>(4096)?;
    // es_blocked's per-node charge terms: unread without ES_TB_Q.
    let bq = dev.stream.alloc_zeros::<f32>(1)?;
    let (nz, ny, nx, ch, nt) = (
        p.nz as i32,
        p.ny as i32,
        p.nx as i32,
        chunk as i32,
        ntable as i32,
    );
    let (tol, hl) = (0.0f64, 4096u32);
    let mut run = |n: usize, it0: u64| -> Res<()> {
        for i in 0..n {
            let it = it0 + 2 * i as u64;
            let out = ((i + 1) % 2) as i32;
            let mut l = dev.stream.launch_builder(&f);
            l.arg(&b.a)
                .arg(&mut b.b)
                .arg(&b.ids)
                .arg(&b.table)
                .arg(&bq)
                .arg(&nt)
                .arg(&nz)
                .arg(&ny)
                .arg(&nx)
                .arg(&ch);
            l.arg(&tol)
                .arg(&it)
                .arg(&mut partials)
                .arg(&mut ticket)
                .arg(&mut ctl)
                .arg(&mut hist)
                .arg(&hl)
                .arg(&out);
            unsafe { l.launch(cfg) }?;
            std::mem::swap(&mut b.a, &mut b.b);
        }
        Ok(())
    };
    run(4, 0)?;
    let mut best = f64::MAX;
    for k in 0..2 {
        best = best.min(timed(dev, || run(500, 8 + 1000 * k))?);
    }
    let c = dev.stream.clone_dtoh(&ctl)?;
    println!("  es_blocked ctl {c:?}");
    Ok(best / 1000.0 * 1e6)
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).map(|s| s.parse()).transpose()?.unwrap_or(512);
    let iters: usize = args.get(2).map(|s| s.parse()).transpose()?.unwrap_or(1000);
    let cfgs: Vec<Cfg> = if args.len() > 3 {
        args[3..]
            .iter()
            .map(|s| Cfg::parse(s))
            .collect::<Res<_>>()?
    } else {
        vec![Cfg::parse("4")?]
    };
    let ctx = CudaContext::new(0)?;
    let dev = Dev {
        stream: ctx.default_stream(),
        ctx: ctx.clone(),
    };
    println!("device: {}", ctx.name()?);
    let base = compile(&dev, &Cfg::parse("4")?.defines())?;
    let copy = base.load_function("copy4")?;

    // The copy ceiling: 2 × 512 MiB, median of 9.
    let words = (512usize << 20) / 16;
    let src = dev.stream.alloc_zeros::<f32>(words * 4)?;
    let mut dst = dev.stream.alloc_zeros::<f32>(words * 4)?;
    let mut ts = Vec::new();
    for _ in 0..9 {
        ts.push(timed(&dev, || {
            let cfg = LaunchConfig {
                grid_dim: (132 * 16, 1, 1),
                block_dim: (256, 1, 1),
                shared_mem_bytes: 0,
            };
            let nw = words as i64;
            let mut l = dev.stream.launch_builder(&copy);
            l.arg(&src).arg(&mut dst).arg(&nw);
            unsafe { l.launch(cfg) }?;
            Ok(())
        })?);
    }
    ts.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let bw = 2.0 * (words * 16) as f64 / ts[4];
    println!("copy: {:.1} GB/s", bw * 1e-9);
    drop((src, dst));

    let small = problem(132, 77, 45, true)?;
    let big = problem(n, n, n, std::env::var_os("ZERO_START").is_none())?;
    println!(
        "stencils: {} (small), {} ({n}³); per-colour floor 13 B/node at the copy rate: {:.1} µs",
        small.distinct,
        big.distinct,
        13.0 * (n * n * n) as f64 / bw * 1e6
    );
    if std::env::var_os("ENGINE_KERNEL").is_some() {
        println!(
            "keisan es_blocked in this harness: {:.1} µs per iteration",
            engine_kernel(&dev, &big, 128)?
        );
    }
    for c in &cfgs {
        match (c.real, c.idb) {
            (32, 8) => run::<f32, u8>(&dev, c, &small, &big, iters, bw)?,
            (32, 16) => run::<f32, u16>(&dev, c, &small, &big, iters, bw)?,
            (64, 8) => run::<f64, u8>(&dev, c, &small, &big, iters, bw)?,
            (64, 16) => run::<f64, u16>(&dev, c, &small, &big, iters, bw)?,
            _ => return Err("real 32|64, ids 8|16".into()),
        }
    }
    Ok(())
}
