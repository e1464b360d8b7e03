//! Checkpoints: everything a run needs to continue bit for bit — the engine's fields
//! ([`crate::run::Engine::state`]), the step and status, the validated problem and the
//! run loop's history (residuals, diagnostics rows, the series written so far) — with
//! the keisan version that wrote it.
//!
//! File layout (`checkpoint.keisan`): the 8 bytes `KEISANCK`, the header's length as a
//! little-endian u64, the header as JSON, the SHA-256 of those JSON bytes (32 bytes), then
//! each array's values, little-endian, in the header's order; the header holds each
//! array's SHA-256. A file whose header or any array does not match its checksum is
//! refused, naming what is damaged. `python3 -c 'import json,sys; f=open(sys.argv[1],"rb"); f.read(8);
//! n=int.from_bytes(f.read(8),"little"); print(json.loads(f.read(n)))' FILE` shows it.

use std::io::{BufReader, Read};
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::memory::try_filled;
use crate::output::write_atomic;
use crate::precision::{Precision, Real};
use crate::problem::Problem;
use crate::run::{Field, Piece, Restart, Status};

#[cfg(not(target_endian = "little"))]
compile_error!("checkpoints store the host's bytes as little-endian");

const MAGIC: &[u8; 8] = b"KEISANCK";
const FORMAT: u32 = 2;
/// The file name of the latest checkpoint in an output folder.
pub const FILE: &str = "checkpoint.keisan";

/// What the run loop carries across a restart besides the engine's fields.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct History {
    /// Residual of every step so far (iterative solvers).
    #[serde(skip)]
    pub residuals: Vec<f64>,
    pub diagnostics_header: Vec<String>,
    #[serde(with = "rows")]
    pub diagnostics: Vec<Vec<f64>>,
    /// The numbered fields written so far: (time or step, .vti name).
    pub series: Vec<(f64, String)>,
    /// Every file of the numbered series so far (fields, pictures, pieces) with its step:
    /// a restart brings those up to its step into its own run.
    #[serde(default)]
    pub series_files: Vec<(u64, String)>,
    /// The stage (a folder inside the output folder) that held the run's files when the
    /// checkpoint was written.
    #[serde(default)]
    pub stage: Option<String>,
    /// Digits of the step in the series' file names, kept by a restart.
    #[serde(default)]
    pub width: Option<usize>,
}

/// Diagnostics rows in the JSON header. JSON has no NaN or infinity (a residual before the
/// first iteration is NaN): those travel as the strings "NaN", "inf" and "-inf", and a
/// null (what serde_json writes for them) reads back as NaN.
mod rows {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use serde_json::Value;

    pub fn serialize<S: Serializer>(rows: &[Vec<f64>], s: S) -> Result<S::Ok, S::Error> {
        let v: Vec<Vec<Value>> = rows
            .iter()
            .map(|r| {
                r.iter()
                    .map(|&x| match x.is_finite() {
                        true => Value::from(x),
                        false => Value::from(x.to_string()),
                    })
                    .collect()
            })
            .collect();
        v.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Vec<f64>>, D::Error> {
        let v: Vec<Vec<Value>> = Deserialize::deserialize(d)?;
        v.into_iter()
            .map(|r| {
                r.into_iter()
                    .map(|x| match &x {
                        Value::Number(n) => n.as_f64().ok_or("a number out of range"),
                        Value::String(t) => t.parse().map_err(|_| "not a number"),
                        Value::Null => Ok(f64::NAN),
                        _ => Err("not a number"),
                    })
                    .collect::<Result<Vec<f64>, _>>()
                    .map_err(serde::de::Error::custom)
            })
            .collect()
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct ArrayInfo {
    name: String,
    precision: Precision,
    shape: Vec<usize>,
    spacing: Vec<f64>,
    origin: Vec<f64>,
    #[serde(default)]
    coords: Option<Vec<Vec<f64>>>,
    /// SHA-256 of the array's bytes as stored, in hex.
    #[serde(default)]
    sha256: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Header {
    format: u32,
    pub keisan_version: String,
    pub solver: String,
    pub precision: Precision,
    /// The problem file's table with `--set` applied, and the folder its relative paths
    /// are taken from: enough to run the problem again with `--restart` alone.
    pub problem_toml: String,
    pub problem_base: Option<PathBuf>,
    /// The validated problem, compared key by key on restart.
    pub problem: serde_json::Value,
    pub step: u64,
    pub status: Status,
    /// The folder the run wrote its outputs to (absolute): a restart that names none
    /// continues writing there.
    #[serde(default)]
    pub output_dir: Option<PathBuf>,
    arrays: Vec<ArrayInfo>,
    pub history: History,
    /// A checkpoint written in pieces: the main file holds no field, and says where the
    /// pieces are.
    #[serde(default)]
    pieces: Option<PiecesInfo>,
    /// A piece file: whose it is, and the rows its rank's engine is built from.
    #[serde(default)]
    piece: Option<PieceInfo>,
}

/// The main file of a checkpoint written in pieces, one file per rank.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct PiecesInfo {
    /// The whole field.
    field: ArrayInfo,
    /// Per rank, the rows (of the slowest axis) its piece holds.
    rows: Vec<Range<usize>>,
    /// Per rank, its piece file, in the main file's folder.
    files: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct PieceInfo {
    rank: usize,
}

/// An opened checkpoint: its header read and checked, its arrays read on demand.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    pub path: PathBuf,
    pub header: Header,
    data_offset: u64,
}

fn bad(path: &Path, why: impl std::fmt::Display) -> Error {
    Error::Parse(format!("--restart {}: {why}", path.display()))
}

/// The bytes of a slice of plain numbers.
fn bytes_of<T: Real>(v: &[T]) -> &[u8] {
    // SAFETY: f32/f64 have no padding and every bit pattern is a valid byte.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast(), std::mem::size_of_val(v)) }
}

fn array_info<T: Real>(f: &Field<T>) -> ArrayInfo {
    ArrayInfo {
        name: f.name.to_string(),
        precision: T::PRECISION,
        shape: f.shape.clone(),
        spacing: f.spacing.clone(),
        origin: f.origin.clone(),
        coords: f.coords.clone(),
        sha256: String::new(),
    }
}

/// The SHA-256 of `bytes`.
fn digest(bytes: &[u8]) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes).into()
}

/// The SHA-256 of `bytes`, in hex (as the header keeps each array's).
fn sha256(bytes: &[u8]) -> String {
    digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

fn residuals_info(history: &History) -> ArrayInfo {
    ArrayInfo {
        name: "residuals".into(),
        precision: Precision::F64,
        shape: vec![history.residuals.len()],
        spacing: vec![1.0],
        origin: vec![1.0],
        coords: None,
        sha256: String::new(),
    }
}

fn header<T: Real>(
    problem: &Problem,
    step: u64,
    status: Status,
    arrays: Vec<ArrayInfo>,
    history: &History,
) -> Header {
    Header {
        format: FORMAT,
        keisan_version: env!("CARGO_PKG_VERSION").to_string(),
        solver: problem.solver.name().to_string(),
        precision: T::PRECISION,
        problem_toml: toml::to_string(&problem.table).expect("a parsed table serialises"),
        problem_base: problem
            .base
            .as_ref()
            .map(|b| std::path::absolute(b).unwrap_or_else(|_| b.clone())),
        problem: problem.spec.describe(),
        step,
        status,
        output_dir: problem
            .output
            .dir
            .as_ref()
            .map(|d| std::path::absolute(d).unwrap_or_else(|_| d.clone())),
        arrays,
        history: history.clone(),
        pieces: None,
        piece: None,
    }
}

/// The file: magic, header length, header, then `arrays` in order (atomically: a crash
/// while writing leaves the previous file).
fn write_file<T: Real>(
    path: &Path,
    header: &Header,
    arrays: &[&[T]],
    residuals: &[f64],
) -> Result<()> {
    let mut header = header.clone();
    let stored = arrays
        .iter()
        .map(|a| bytes_of(a))
        .chain([bytes_of(residuals)]);
    for (info, bytes) in header.arrays.iter_mut().zip(stored) {
        info.sha256 = sha256(bytes);
    }
    let json = serde_json::to_vec(&header).map_err(|e| {
        Error::io(
            path,
            std::io::Error::new(std::io::ErrorKind::InvalidData, format!("its header: {e}")),
        )
    })?;
    let sealed = digest(&json);
    write_atomic(path, |w| {
        w.write_all(MAGIC)?;
        w.write_all(&(json.len() as u64).to_le_bytes())?;
        w.write_all(&json)?;
        w.write_all(&sealed)?;
        for a in arrays {
            w.write_all(bytes_of(a))?;
        }
        w.write_all(bytes_of(residuals))
    })
}

/// Write a checkpoint of `fields` at `step` for `problem` (atomically: a crash while
/// writing leaves the previous checkpoint).
pub fn write<T: Real>(
    path: &Path,
    problem: &Problem,
    step: u64,
    status: Status,
    fields: &[Field<T>],
    history: &History,
) -> Result<()> {
    let mut arrays: Vec<ArrayInfo> = fields.iter().map(array_info).collect();
    arrays.push(residuals_info(history));
    let h = header::<T>(problem, step, status, arrays, history);
    let data: Vec<&[T]> = fields.iter().map(|f| &f.data[..]).collect();
    write_file(path, &h, &data, &history.residuals)
}

/// The name of rank `rank`'s piece of the checkpoint of `step`.
pub fn piece_file(step: u64, rank: usize) -> String {
    format!("checkpoint.s{step}.r{rank:04}.keisan")
}

/// One rank's piece of a checkpoint written in pieces: its owned rows of the field, in
/// `dir`/[`piece_file`]. Every rank writes its piece
/// before rank 0 writes the main file ([`write_index`]).
pub fn write_piece<T: Real>(
    dir: &Path,
    problem: &Problem,
    step: u64,
    status: Status,
    piece: &Piece<T>,
) -> Result<PathBuf> {
    let mut info = array_info(&piece.whole);
    info.shape[0] = piece.rows().len();
    let empty = History::default();
    let mut h = header::<T>(
        problem,
        step,
        status,
        vec![info, residuals_info(&empty)],
        &empty,
    );
    h.piece = Some(PieceInfo { rank: piece.rank });
    let path = dir.join(piece_file(step, piece.rank));
    write_file(&path, &h, &[&piece.data[..]], &[])?;
    Ok(path)
}

/// The main file of a checkpoint written in pieces (rank 0, once every piece is written):
/// the step, the history and where the pieces are; no field.
pub fn write_index<T: Real>(
    path: &Path,
    problem: &Problem,
    step: u64,
    status: Status,
    piece: &Piece<T>,
    history: &History,
) -> Result<()> {
    let mut h = header::<T>(
        problem,
        step,
        status,
        vec![residuals_info(history)],
        history,
    );
    h.pieces = Some(PiecesInfo {
        field: array_info(&piece.whole),
        rows: piece.ranks.clone(),
        files: (0..piece.ranks.len())
            .map(|r| piece_file(step, r))
            .collect(),
    });
    write_file::<T>(path, &h, &[], &history.residuals)
}

/// Remove this rank's piece files of checkpoints other than `step`'s in `dir` (after the
/// main file names the new ones).
pub fn remove_old_pieces(dir: &Path, step: u64, rank: usize) -> Result<()> {
    let keep = piece_file(step, rank);
    let suffix = format!(".r{rank:04}.keisan");
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("checkpoint.s") && name.ends_with(&suffix) && name != keep {
            std::fs::remove_file(e.path()).map_err(|err| Error::io(e.path(), err))?;
        }
    }
    Ok(())
}

impl Checkpoint {
    pub fn open(path: &Path) -> Result<Self> {
        let file = crate::input::open_regular(path, |why| bad(path, why))?;
        let len = file.metadata().map_err(|e| bad(path, e))?.len();
        let mut r = BufReader::new(file);
        let mut head = [0u8; 16];
        r.read_exact(&mut head)
            .ok()
            .filter(|_| &head[..8] == MAGIC)
            .ok_or_else(|| bad(path, "not a keisan checkpoint"))?;
        let n = u64::from_le_bytes(head[8..].try_into().expect("8 bytes"));
        if n > len.saturating_sub(16) {
            return Err(bad(path, "truncated (the header runs past the end)"));
        }
        let mut json = vec![0u8; n as usize];
        r.read_exact(&mut json).map_err(|e| bad(path, e))?;
        // The checksum first: a damaged header may not even parse.
        let mut stored = [0u8; 32];
        let sealed = r.read_exact(&mut stored).is_ok() && digest(&json) == stored;
        let format: Option<serde_json::Value> = serde_json::from_slice(&json).ok();
        let version = format.as_ref().and_then(|f| f.get("format")?.as_u64());
        if let Some(f) = format
            .as_ref()
            .filter(|_| version.is_some_and(|v| v != FORMAT as u64))
        {
            return Err(bad(
                path,
                format!(
                    "checkpoint format {} (keisan {}); this keisan {} reads format {FORMAT}",
                    f["format"],
                    f["keisan_version"],
                    env!("CARGO_PKG_VERSION")
                ),
            ));
        }
        if !sealed {
            return Err(bad(
                path,
                "damaged: the header does not match its checksum (edited or corrupted); \
                 it cannot be trusted to continue the run",
            ));
        }
        let format = format.ok_or_else(|| bad(path, "damaged header: not JSON"))?;
        let header: Header = serde_json::from_value(format)
            .map_err(|e| bad(path, format!("damaged header: {e}")))?;
        let data: u64 = header
            .arrays
            .iter()
            .map(|a| (a.shape.iter().product::<usize>() * a.precision.bytes()) as u64)
            .sum();
        // The magic and length, the header, its checksum, then the arrays.
        let data_offset = 16 + n + 32;
        if data_offset + data != len {
            return Err(bad(
                path,
                format!(
                    "holds {len} bytes where its header describes {}: truncated or damaged",
                    data_offset + data
                ),
            ));
        }
        check_structure(&header).map_err(|why| bad(path, format!("damaged header: {why}")))?;
        Ok(Self {
            path: path.to_path_buf(),
            header,
            data_offset,
        })
    }

    /// Refuse to continue `problem` from this checkpoint unless it is the same problem
    /// (up to the keys a restart may change) written by this version of keisan.
    pub fn check_compatible(&self, problem: &Problem) -> Result<()> {
        let h = &self.header;
        let refuse = |why: String| Err(bad(&self.path, why));
        if let Some(piece) = &h.piece {
            return refuse(format!(
                "rank {}'s piece of a checkpoint written in pieces: restart from {} in the \
                 same folder, which names every piece",
                piece.rank, FILE
            ));
        }
        if h.keisan_version != env!("CARGO_PKG_VERSION") {
            return refuse(format!(
                "written by keisan {}, this is keisan {}: continue it with the version that \
                 wrote it",
                h.keisan_version,
                env!("CARGO_PKG_VERSION")
            ));
        }
        if h.solver != problem.solver.name() {
            return refuse(format!(
                "a checkpoint of the {} solver; the problem's solver is {}",
                h.solver,
                problem.solver.name()
            ));
        }
        if h.precision != problem.precision {
            return refuse(format!(
                "written in {}; the problem runs in {} (precision = \"{}\" or --precision {})",
                h.precision, problem.precision, h.precision, h.precision
            ));
        }
        let may_change = problem.spec.restart_may_change();
        let mut diffs = Vec::new();
        diff(
            problem.solver.name(),
            &h.problem,
            &problem.spec.describe(),
            may_change,
            &mut diffs,
        );
        if !diffs.is_empty() {
            return refuse(format!(
                "a different problem: {} (a restart may change only {})",
                diffs.join("; "),
                may_change
                    .iter()
                    .map(|k| format!("{}.{k}", problem.solver.name()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let max = problem.spec.max_steps();
        if h.step > max {
            return refuse(format!(
                "at step {}, past the problem's last step {max}: raise the step limit to \
                 continue",
                h.step
            ));
        }
        Ok(())
    }

    /// The engine's fields and the residual history, in `T` (the precision is checked by
    /// [`Checkpoint::check_compatible`]).
    pub fn restart<T: Real>(&self) -> Result<(Restart<T>, Vec<f64>)> {
        let (mut restart, residuals) = self.read_arrays::<T>()?;
        if let Some(p) = &self.header.pieces {
            restart.fields.push(self.assemble::<T>(p)?);
        }
        Ok((restart, residuals))
    }

    /// Whether the checkpoint was written in pieces, and by how many ranks.
    pub fn pieces(&self) -> Option<usize> {
        self.header.pieces.as_ref().map(|p| p.rows.len())
    }

    /// The whole field of a checkpoint in pieces, as this rank's engine needs it: its own
    /// piece and its neighbours' (rank ± 1, around the ends too) — a slab's halo never
    /// reaches past its neighbour's rows, whatever halo the restarted engine takes (the
    /// CPU's, or a GPU's wider one) — the rest left zero (never touched, so never backed
    /// by memory).
    fn assemble<T: Real>(&self, p: &PiecesInfo) -> Result<Field<T>> {
        let ranks = p.rows.len();
        let (rank, size) = crate::parallel::World::current().map_or((0, 1), |w| (w.rank, w.size));
        if size != ranks {
            return Err(Error::invalid(
                "--restart",
                self.path.display(),
                format!(
                    "written in pieces by {ranks} rank(s); continue it on {ranks} (mpirun -np \
                     {ranks}), or write gathered checkpoints (output.pieces = \"gather\") to \
                     change the rank count"
                ),
            ));
        }
        let folder = self.path.parent().unwrap_or(Path::new("."));
        let open = |r: usize| -> Result<Checkpoint> {
            let c = Checkpoint::open(&folder.join(&p.files[r]))?;
            let ok = c.header.step == self.header.step
                && c.header.piece.as_ref().is_some_and(|q| q.rank == r)
                && c.header
                    .arrays
                    .first()
                    .is_some_and(|a| a.precision == T::PRECISION && a.shape[0] == p.rows[r].len());
            if !ok {
                return Err(bad(
                    &c.path,
                    format!(
                        "not rank {r}'s piece of the checkpoint of step {}",
                        self.header.step
                    ),
                ));
            }
            Ok(c)
        };
        let a = &p.field;
        if a.precision != T::PRECISION {
            return Err(bad(
                &self.path,
                format!("array {} is {}", a.name, a.precision),
            ));
        }
        let row: usize = a.shape[1..].iter().product();
        let len = a.shape[0] * row;
        // Zeroed memory is mapped lazily: only the rows read below take pages.
        let mut data = vec![T::zero(); len];
        let mut wanted = vec![(rank + ranks - 1) % ranks, rank, (rank + 1) % ranks];
        wanted.sort_unstable();
        wanted.dedup();
        for r in wanted {
            let c = open(r)?;
            let held = p.rows[r].clone();
            let mut f = std::fs::File::open(&c.path).map_err(|e| bad(&c.path, e))?;
            std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(c.data_offset))
                .map_err(|e| bad(&c.path, e))?;
            let rows = &mut data[held.start * row..held.end * row];
            read_into(&mut f, rows, &c.path)?;
            verify(&c.path, &c.header.arrays[0], bytes_of(rows))?;
        }
        Ok(Field {
            name: leak_name(&a.name),
            shape: a.shape.clone(),
            spacing: a.spacing.clone(),
            origin: a.origin.clone(),
            coords: a.coords.clone(),
            data,
        })
    }

    fn read_arrays<T: Real>(&self) -> Result<(Restart<T>, Vec<f64>)> {
        let file = std::fs::File::open(&self.path).map_err(|e| bad(&self.path, e))?;
        let mut r = BufReader::with_capacity(1 << 20, file);
        std::io::Seek::seek(&mut r, std::io::SeekFrom::Start(self.data_offset))
            .map_err(|e| bad(&self.path, e))?;
        let mut fields = Vec::new();
        let mut residuals = Vec::new();
        for a in &self.header.arrays {
            let len: usize = a.shape.iter().product();
            if a.name == "residuals" {
                residuals = read_values::<f64>(&mut r, len, &self.path)?;
                verify(&self.path, a, bytes_of(&residuals))?;
            } else {
                if a.precision != T::PRECISION {
                    return Err(bad(
                        &self.path,
                        format!("array {} is {}", a.name, a.precision),
                    ));
                }
                let data = read_values::<T>(&mut r, len, &self.path)?;
                verify(&self.path, a, bytes_of(&data))?;
                fields.push(Field {
                    name: leak_name(&a.name),
                    shape: a.shape.clone(),
                    spacing: a.spacing.clone(),
                    origin: a.origin.clone(),
                    coords: a.coords.clone(),
                    data,
                });
            }
        }
        Ok((
            Restart {
                step: self.header.step,
                status: self.header.status,
                fields,
            },
            residuals,
        ))
    }
}

/// Refuse array `a` whose bytes do not match its checksum.
fn verify(path: &Path, a: &ArrayInfo, bytes: &[u8]) -> Result<()> {
    if sha256(bytes) == a.sha256 {
        return Ok(());
    }
    Err(bad(
        path,
        format!(
            "damaged: the values of array `{}` do not match their checksum; it cannot be \
             trusted to continue the run",
            a.name
        ),
    ))
}

/// What a header written by keisan always is: each array named once, the residual history
/// last and one-dimensional, shapes of at least one axis, diagnostics rows as long as
/// their header, a field unless the file is the index of one written in pieces.
fn check_structure(h: &Header) -> std::result::Result<(), String> {
    let mut names = std::collections::HashSet::new();
    for a in &h.arrays {
        if !names.insert(a.name.as_str()) {
            return Err(format!("array `{}` appears twice", a.name));
        }
        if a.shape.is_empty() {
            return Err(format!("array `{}` has no shape", a.name));
        }
    }
    match h.arrays.last() {
        Some(a) if a.name == "residuals" && a.shape.len() == 1 && a.precision == Precision::F64 => {
        }
        _ => return Err("no residual history".into()),
    }
    if h.pieces.is_none() && h.arrays.len() < 2 {
        return Err("no field".into());
    }
    let width = h.history.diagnostics_header.len();
    if h.history.diagnostics.iter().any(|r| r.len() != width) {
        return Err("diagnostics rows do not match their header".into());
    }
    Ok(())
}

/// Field names are `&'static str` (solvers name their fields with literals); a restored
/// one is interned once per name.
fn leak_name(name: &str) -> &'static str {
    use std::collections::HashSet;
    use std::sync::{Mutex, OnceLock};
    static NAMES: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let mut names = NAMES
        .get_or_init(Default::default)
        .lock()
        .expect("not poisoned");
    match names.get(name) {
        Some(n) => n,
        None => {
            let n: &'static str = Box::leak(name.to_string().into_boxed_str());
            names.insert(n);
            n
        }
    }
}

fn read_values<T: Real>(r: &mut impl Read, len: usize, path: &Path) -> Result<Vec<T>> {
    let mut v = try_filled(len, T::zero(), "the checkpoint's fields")?;
    read_into(r, &mut v, path)?;
    Ok(v)
}

/// Fill `out` with the file's next values.
fn read_into<T: Real>(r: &mut impl Read, out: &mut [T], path: &Path) -> Result<()> {
    // SAFETY: as in `bytes_of`; every byte pattern is a valid f32/f64.
    let bytes = unsafe {
        std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(out))
    };
    r.read_exact(bytes).map_err(|e| bad(path, e))
}

/// Keys of two validated problems that differ, except those in `skip` (top level).
fn diff(
    at: &str,
    old: &serde_json::Value,
    new: &serde_json::Value,
    skip: &[&str],
    out: &mut Vec<String>,
) {
    use serde_json::Value::Object;
    match (old, new) {
        (Object(a), Object(b)) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                if skip.contains(&k.as_str()) {
                    continue;
                }
                let null = serde_json::Value::Null;
                let path = format!("{at}.{k}");
                diff(
                    &path,
                    a.get(k).unwrap_or(&null),
                    b.get(k).unwrap_or(&null),
                    &[],
                    out,
                );
            }
        }
        (a, b) if a != b => out.push(format!("{at} is {a} in the checkpoint, {b} now")),
        _ => {}
    }
}
