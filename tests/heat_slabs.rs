//! Heat in-core on slabs (src/parallel: planes in 3D, rows in 2D): every decomposition
//! equals the undecomposed CPU reference bit for bit — CPU slabs always, CUDA slabs on one
//! device (several share it, 3D passes of several steps and single steps) and on two when
//! the machine has them.

mod common;

use keisan::device::Placement;
use keisan::precision::Real;
use keisan::run::{Engine, Field, Restart, Status};
use keisan::solvers::heat::{self, HeatProblem};

/// The engine for `placement`, started from `u0` (as a restart at step 0).
fn engine_from<T: Real>(
    p: &HeatProblem,
    placement: &Placement,
    u0: &[f64],
) -> Box<dyn Engine<Real = T>> {
    let field = Field {
        name: "u",
        shape: p.user_shape(),
        spacing: p.user_spacing(),
        origin: vec![0.0; p.dims],
        coords: None,
        data: u0.iter().map(|&v| T::lit(v)).collect(),
    };
    let restart = Restart {
        step: 0,
        status: Status::Running,
        fields: vec![field],
    };
    heat::engine_placed::<T>(p, placement, Some(restart))
        .unwrap()
        .0
}

/// `p.steps` steps from a random field on `placement`, in chunks that end mid-pass.
fn run<T: Real>(p: &HeatProblem, placement: &Placement, u0: &[f64]) -> Vec<T> {
    let mut e = engine_from::<T>(p, placement, u0);
    let mut done = 0;
    for chunk in [3, 1, 7, 2].iter().cycle() {
        let k = (*chunk).min(p.steps - done);
        e.advance(k).unwrap();
        done += k;
        if done == p.steps {
            break;
        }
    }
    assert_eq!(e.diagnostics().unwrap().steps, p.steps);
    e.snapshot().unwrap().data
}

/// 2D and 3D grids whose slab axis the slabs do not divide evenly; the 3D one with rows
/// of whole vectors (CUDA passes of 4 steps) and one without (single steps).
const CASES: [(&str, &str); 3] = [
    ("[45, 38]", ""),
    ("[22, 20, 64]", "temporal_block = 4"),
    ("[21, 18, 30]", ""),
];

fn slabs_equal_the_cpu_reference<T: Real>(placements: &[Placement]) {
    let mut rng = common::rng();
    for (shape, extra) in CASES {
        let p = common::heat_problem(shape, 13, extra);
        let u0 = common::random_field(p.cells(), &mut rng);
        let (reference, _) = common::heat_run::<T>(&p, &common::cpu(), &u0);
        for placement in placements {
            let slabs = run::<T>(&p, placement, &u0);
            assert!(
                common::same_bits(&reference, &slabs),
                "{shape} {extra}: {}",
                placement.describe()
            );
        }
    }
}

#[test]
fn cpu_slabs_equal_the_whole_grid_bit_for_bit() {
    let cpu = common::cpu();
    let placements = [
        common::on(&cpu, 2),
        common::on(&cpu, 3),
        common::on(&cpu, 5),
    ];
    slabs_equal_the_cpu_reference::<f64>(&placements);
    slabs_equal_the_cpu_reference::<f32>(&placements);
}

#[test]
fn a_1d_grid_and_out_of_core_slabs_are_refused_by_name() {
    let cpu = common::on(&common::cpu(), 2);
    for (shape, extra) in [("[100]", ""), ("[40, 40]", "strategy = \"pyramid\"")] {
        let p = common::heat_problem(shape, 1, extra);
        let e = heat::engine_placed::<f64>(&p, &cpu, None)
            .err()
            .expect("refused");
        assert!(e.to_string().contains("--subdomains"), "{e}");
        assert_eq!(e.exit_code(), 2);
    }
}

#[test]
fn cuda_slabs_on_one_device_equal_the_cpu_reference_bit_for_bit() {
    let Some(gpu) = common::gpu_or_skip("heat CUDA slabs") else {
        return;
    };
    let placements = [common::on(&gpu, 2), common::on(&gpu, 3)];
    slabs_equal_the_cpu_reference::<f64>(&placements);
    slabs_equal_the_cpu_reference::<f32>(&placements);
}

#[test]
fn cuda_slabs_on_two_devices_equal_the_cpu_reference_bit_for_bit() {
    let Some(two) = common::two_gpus_or_skip("heat CUDA slabs on two devices", None) else {
        return;
    };
    slabs_equal_the_cpu_reference::<f64>(std::slice::from_ref(&two));
    slabs_equal_the_cpu_reference::<f32>(std::slice::from_ref(&two));
}

/// `keisan bench` times slabs with their halo exchange switched off
/// (`Engine::set_halo_exchange`): off, the slabs' field parts from the whole grid's (the
/// halos keep their first values); switched on again before any step, it equals it; an
/// engine without halos says it has none.
fn exchange_switch<T: Real>(placement: &Placement) {
    let mut rng = common::rng();
    let p = common::heat_problem("[22, 20, 64]", 13, "temporal_block = 4");
    let u0 = common::random_field(p.cells(), &mut rng);
    let (reference, _) = common::heat_run::<T>(&p, &common::cpu(), &u0);
    let mut e = engine_from::<T>(&p, placement, &u0);
    assert!(e.set_halo_exchange(false));
    e.advance(p.steps).unwrap();
    let off = e.snapshot().unwrap().data;
    assert!(
        !common::same_bits(&reference, &off),
        "{}",
        placement.describe()
    );
    let mut e = engine_from::<T>(&p, placement, &u0);
    assert!(e.set_halo_exchange(false) && e.set_halo_exchange(true));
    e.advance(p.steps).unwrap();
    let on = e.snapshot().unwrap().data;
    assert!(
        common::same_bits(&reference, &on),
        "{}",
        placement.describe()
    );
    let mut one = engine_from::<T>(&p, &Placement::single(common::cpu()), &u0);
    assert!(!one.set_halo_exchange(false));
}

#[test]
fn cpu_slabs_without_their_exchange_part_from_the_whole_grid() {
    exchange_switch::<f64>(&common::on(&common::cpu(), 3));
}

#[test]
fn cuda_slabs_without_their_exchange_part_from_the_whole_grid() {
    let Some(gpu) = common::gpu_or_skip("heat CUDA slabs without their exchange") else {
        return;
    };
    exchange_switch::<f32>(&common::on(&gpu, 2));
}

/// Where `p` (from a field with one spike) first goes non-finite on `placement`: the
/// steps reported and the status, after one advance over every step (whole passes).
fn blow_up<T: Real>(p: &HeatProblem, placement: &Placement, spike: f64) -> (u64, Status) {
    let mut u0 = vec![0.0; p.cells()];
    u0[p.cells() / 2 + p.shape[2] / 2] = spike;
    let mut e = engine_from::<T>(p, placement, &u0);
    e.advance(p.steps).unwrap();
    let d = e.diagnostics().unwrap();
    (d.steps, d.status)
}

/// A run made unstable on purpose (dt past the stability limit, set after validation)
/// overflows in the middle of a several-step pass: every placement names the same step as
/// the CPU, so a slab names the exact step and not the pass's first (CUDA slabs replay
/// the pass). 8, 12, 14 and 16 steps: nothing, one pass, two single steps and two more
/// passes run after the failed pass before the check, so the replay finds its input in
/// either buffer, its halo in place (8) or copied aside by the next pass.
fn unstable_runs_stop_at_the_cpu_step<T: Real>(placements: &[Placement], spike: f64) {
    for steps in [8, 12, 14, 16] {
        let mut p = common::heat_problem("[22, 20, 64]", steps, "temporal_block = 4");
        p.dt *= 30.0;
        let (at, status) = blow_up::<T>(&p, &common::on(&common::cpu(), 1), spike);
        eprintln!("{}: non-finite at step {at}", T::PRECISION);
        assert_eq!(status, Status::NonFinite);
        assert!(
            at % 4 != 1,
            "step {at} is a pass's first: pick another spike"
        );
        for placement in placements {
            let got = blow_up::<T>(&p, placement, spike);
            assert_eq!(got, (at, status), "{steps} steps: {}", placement.describe());
        }
    }
}

#[test]
fn cpu_slabs_stop_at_the_step_an_unstable_run_overflows() {
    let cpu = common::cpu();
    let placements = [common::on(&cpu, 2), common::on(&cpu, 3)];
    unstable_runs_stop_at_the_cpu_step::<f64>(&placements, 1e300);
    unstable_runs_stop_at_the_cpu_step::<f32>(&placements, 1e30);
}

#[test]
fn cuda_stops_at_the_step_an_unstable_run_overflows() {
    let Some(gpu) = common::gpu_or_skip("heat CUDA unstable run") else {
        return;
    };
    // One device (the in-core pass, replayed on failure) and slabs (the exact probe).
    let placements = [
        common::on(&gpu, 1),
        common::on(&gpu, 2),
        common::on(&gpu, 3),
    ];
    unstable_runs_stop_at_the_cpu_step::<f64>(&placements, 1e300);
    unstable_runs_stop_at_the_cpu_step::<f32>(&placements, 1e30);
}
