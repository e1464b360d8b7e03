//! Manufactured solutions: an exact u that vanishes on the boundary of [−1,1]², and
//! the f that goes with it. Keep in step with `exact_u` / `forcing` in kernels.cu.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Manufactured {
    /// u = (1−x²)(1−y²), the study's. Quadratic in each variable, so the 5-point
    /// stencil reproduces it exactly: the remaining error is iteration error only.
    #[default]
    Polynomial,
    /// u = sin(π(x+1)/2)·sin(π(y+1)/2): the stencil's O(h²) truncation error shows,
    /// which makes it the case for convergence-order checks.
    Sine,
}

const K: f64 = std::f64::consts::FRAC_PI_2;

impl Manufactured {
    /// The integer the kernels switch on.
    pub fn code(self) -> i32 {
        match self {
            Manufactured::Polynomial => 0,
            Manufactured::Sine => 1,
        }
    }

    pub fn exact(self, x: f64, y: f64) -> f64 {
        match self {
            Manufactured::Polynomial => (1.0 - x * x) * (1.0 - y * y),
            Manufactured::Sine => (K * (x + 1.0)).sin() * (K * (y + 1.0)).sin(),
        }
    }

    /// f = u_xx + u_yy − αu for the exact u.
    pub fn forcing(self, alpha: f64, x: f64, y: f64) -> f64 {
        match self {
            Manufactured::Polynomial => {
                -alpha * (1.0 - x * x) * (1.0 - y * y) - 2.0 * (1.0 - x * x) - 2.0 * (1.0 - y * y)
            }
            Manufactured::Sine => -(2.0 * K * K + alpha) * self.exact(x, y),
        }
    }
}
