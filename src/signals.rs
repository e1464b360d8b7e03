//! SIGINT and SIGTERM during a run: the first one is noted and the run loop stops at the
//! end of its current chunk (writing a checkpoint if checkpoints are configured); a
//! second one ends the process at once.

use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use signal_hook::consts::{SIGINT, SIGTERM};

/// The signals keisan stops for, each with the flag its handler sets.
static FLAGS: OnceLock<[(i32, Arc<AtomicBool>); 2]> = OnceLock::new();

/// True while a run sets up (reads its inputs, builds its geometry and engine): a signal
/// then ends the process at once, since nothing has been written and no loop would see
/// the flag for what may be minutes.
static SETTING_UP: OnceLock<Arc<AtomicBool>> = OnceLock::new();

/// Catch SIGINT and SIGTERM from now on (the `run` command does; library users may). Until
/// [`setup_done`], either ends the process at once with the conventional code.
pub fn install() -> std::io::Result<()> {
    let flags = FLAGS.get_or_init(|| {
        [
            (SIGINT, Arc::new(AtomicBool::new(false))),
            (SIGTERM, Arc::new(AtomicBool::new(false))),
        ]
    });
    let setting_up = SETTING_UP.get_or_init(|| Arc::new(AtomicBool::new(true)));
    for (sig, flag) in flags {
        signal_hook::flag::register_conditional_shutdown(*sig, 128 + *sig, setting_up.clone())?;
        // Registered first, so it sees the flag as it was before this signal: a second
        // signal exits at once with the conventional code.
        for (_, any) in flags {
            signal_hook::flag::register_conditional_shutdown(*sig, 128 + *sig, any.clone())?;
        }
        signal_hook::flag::register(*sig, flag.clone())?;
    }
    Ok(())
}

/// The run's set-up is over: from now on the first signal is noted and the run loop
/// stops at the end of its chunk.
pub fn setup_done() {
    if let Some(f) = SETTING_UP.get() {
        f.store(false, Ordering::SeqCst);
    }
}

/// The signal that asked the run to stop, if one has arrived.
pub fn pending() -> Option<i32> {
    FLAGS
        .get()?
        .iter()
        .find(|(_, f)| f.load(Ordering::Relaxed))
        .map(|(sig, _)| *sig)
}

/// The signal that asked the run to stop, as every rank of an mpirun sees it: the first
/// rank's (in rank order) that got one. Collective under mpirun — every rank calls it at
/// the same point of the run — so all ranks stop at the same step even when the signal
/// reached only some of them, or reached them at different times.
pub fn agreed() -> crate::error::Result<Option<i32>> {
    let mine = pending();
    let Some(w) = crate::parallel::World::current() else {
        return Ok(mine);
    };
    use crate::parallel::world;
    let all = world::from_bytes::<i32>(&world::all_gather(
        &mine.unwrap_or(0).to_le_bytes(),
        &vec![4; w.size],
    )?);
    Ok(all.into_iter().find(|&s| s != 0))
}

pub fn name(sig: i32) -> &'static str {
    match sig {
        SIGINT => "SIGINT",
        SIGTERM => "SIGTERM",
        _ => "a signal",
    }
}
