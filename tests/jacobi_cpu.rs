//! The CPU reference engine against an independent implementation and analytic solutions.

mod common;

use common::{problem, rel_max_diff};
use keisan::device::Device;
use keisan::run::{self, Status};
use keisan::solvers::jacobi::{self, Fields, JacobiProblem, Manufactured};

fn cpu() -> Device {
    Device::Cpu {
        threads: rayon::current_num_threads(),
    }
}

/// The study's loop written as plainly as possible: real division by b, fresh arrays,
/// sequential sums. Returns (u, residual per iteration, solution error).
/// Index loops on purpose: it should read like the study's Fortran.
#[allow(clippy::needless_range_loop)]
fn straightforward(p: &JacobiProblem, iters: usize) -> (Vec<f64>, Vec<f64>, f64) {
    let (n, m) = (p.n, p.m);
    let dx = 2.0 / (n as f64 - 1.0);
    let dy = 2.0 / (m as f64 - 1.0);
    let ax = 1.0 / (dx * dx);
    let ay = 1.0 / (dy * dy);
    let b = -2.0 / (dx * dx) - 2.0 / (dy * dy) - p.alpha;
    let xs = |i: usize| -1.0 + dx * i as f64;
    let ys = |j: usize| -1.0 + dy * j as f64;
    let mut f = vec![vec![0.0; n]; m];
    for (j, row) in f.iter_mut().enumerate() {
        for (i, v) in row.iter_mut().enumerate() {
            let (x, y) = (xs(i), ys(j));
            *v = -p.alpha * (1.0 - x * x) * (1.0 - y * y)
                - 2.0 * (1.0 - x * x)
                - 2.0 * (1.0 - y * y);
        }
    }
    let mut u = vec![vec![0.0; n]; m];
    let mut history = Vec::new();
    for _ in 0..iters {
        let uold = u.clone();
        let mut sum = 0.0;
        for j in 1..m - 1 {
            for i in 1..n - 1 {
                let resid = (ax * (uold[j][i - 1] + uold[j][i + 1])
                    + ay * (uold[j - 1][i] + uold[j + 1][i])
                    + b * uold[j][i]
                    - f[j][i])
                    / b;
                u[j][i] = uold[j][i] - p.relax * resid;
                sum += resid * resid;
            }
        }
        history.push(sum.sqrt() / (n * m) as f64);
    }
    let mut err = 0.0;
    for j in 0..m {
        for i in 0..n {
            let (x, y) = (xs(i), ys(j));
            let e = u[j][i] - (1.0 - x * x) * (1.0 - y * y);
            err += e * e;
        }
    }
    (u.concat(), history, err.sqrt() / (n * m) as f64)
}

#[test]
fn cpu_equals_straightforward_implementation_after_100_iterations() {
    let p = problem(53, 41, 0.5, 0.0, 100);
    let (u_ref, hist_ref, err_ref) = straightforward(&p, 100);
    let mut e = jacobi::engine::<f64>(&p, &cpu(), Fields::Manufactured).unwrap();
    let out = run::drive(e.as_mut(), 100, &run::progress_bar(100, true)).unwrap();
    assert_eq!(out.steps, 100);
    // Multiplying by 1/b instead of dividing by b changes the last bit or so per
    // operation; 1e-12 relative leaves room for that over 100 iterations, no more.
    assert!(rel_max_diff(&out.residuals, &hist_ref) < 1e-12);
    let u = e.snapshot().unwrap();
    assert_eq!(u.shape, vec![41, 53]);
    assert!(rel_max_diff(&u.data, &u_ref) < 1e-12);
    let err = e.solution_error().unwrap();
    assert!(
        ((err - err_ref) / err_ref).abs() < 1e-12,
        "{err} vs {err_ref}"
    );
}

fn converged_max_error(n: usize, exact: Manufactured) -> f64 {
    let mut p = problem(n, n, 1.0, 1e-16, 400_000);
    p.exact = exact;
    let mut e = jacobi::engine::<f64>(&p, &cpu(), Fields::Manufactured).unwrap();
    let out = run::drive(e.as_mut(), p.max_iterations, &run::progress_bar(0, true)).unwrap();
    assert_eq!(out.status, Status::Converged, "n = {n} did not converge");
    let u = e.snapshot().unwrap();
    let mut max = 0.0f64;
    for j in 0..n {
        for i in 0..n {
            let (x, y) = p.point(i, j);
            max = max.max((u.data[j * n + i] - exact.exact(x, y)).abs());
        }
    }
    max
}

#[test]
fn sine_solution_error_falls_as_h_squared() {
    let errs: Vec<f64> = [17, 33, 65]
        .iter()
        .map(|&n| converged_max_error(n, Manufactured::Sine))
        .collect();
    for w in errs.windows(2) {
        let order = (w[0] / w[1]).log2();
        assert!(
            (1.9..2.1).contains(&order),
            "observed order {order:.3} from {errs:?}"
        );
    }
}

#[test]
fn polynomial_solution_is_reproduced_exactly_by_the_stencil() {
    // (1−x²)(1−y²) is quadratic per axis: the 5-point stencil has no truncation error,
    // so only iteration error remains once converged.
    let err = converged_max_error(33, Manufactured::Polynomial);
    assert!(err < 1e-11, "max error {err:e}");
}

#[test]
fn cpu_result_does_not_depend_on_thread_count() {
    let p = problem(101, 77, 0.5, 0.0, 20);
    let run_with = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let mut e = jacobi::engine::<f64>(&p, &cpu(), Fields::Manufactured).unwrap();
            let out = run::drive(e.as_mut(), 20, &run::progress_bar(0, true)).unwrap();
            (e.snapshot().unwrap().data, out.residuals)
        })
    };
    assert_eq!(run_with(1), run_with(2));
}

#[test]
fn stops_at_the_first_iteration_under_tolerance() {
    let p = problem(21, 21, 1.0, 1e-9, 100_000);
    let mut e = jacobi::engine::<f64>(&p, &cpu(), Fields::Manufactured).unwrap();
    let out = run::drive(e.as_mut(), p.max_iterations, &run::progress_bar(0, true)).unwrap();
    assert_eq!(out.status, Status::Converged);
    let r = &out.residuals;
    assert_eq!(r.len() as u64, out.steps);
    assert!(r[r.len() - 1] <= 1e-9 && r[r.len() - 2] > 1e-9);
}

#[test]
fn nan_in_the_forcing_stops_the_run_with_the_iteration() {
    let p = problem(9, 9, 0.5, 0.0, 50);
    let mut f = vec![0.0; 81];
    f[40] = f64::NAN;
    let mut e = jacobi::engine::<f64>(
        &p,
        &cpu(),
        Fields::Given {
            f,
            u0: vec![0.0; 81],
        },
    )
    .unwrap();
    let err = run::drive(e.as_mut(), 50, &run::progress_bar(0, true)).unwrap_err();
    assert!(err.to_string().contains("at step 1;"), "{err}");
}
