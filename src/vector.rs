//! CPU loops compiled for wider vectors than the build's baseline (x86-64: SSE2), picked
//! at run time. The engines' hot loops are written once as `#[inline(always)]` functions
//! whose operations are exact IEEE ones in any width (and Rust never contracts a multiply
//! and an add into an FMA), so every form gives the same bits.

/// `mod $name` holding forms of the `#[inline(always)]` function `$body` of the enclosing
/// module: `plain` (the baseline), `avx2` and `avx512` (x86-64; unsafe: the CPU must have
/// the feature) and `widest`, the widest form this CPU runs. `[$gen]` are `$body`'s
/// generic parameters with their bounds, `[$garg]` the arguments that name them.
///
/// A closure called inside `$body` is not inlined into a form compiled with extra target
/// features (it lacks them): the hot loop must call functions, not closures.
macro_rules! vector_forms {
    (
        $(#[$doc:meta])*
        $vis:vis mod $name:ident = $body:ident [$($gen:tt)*] [$($garg:tt)*]
            ($($arg:ident : $ty:ty),* $(,)?) -> $ret:ty;
    ) => {
        $(#[$doc])*
        $vis mod $name {
            #[allow(unused_imports)]
            use super::*;

            /// The baseline form.
            #[allow(dead_code, clippy::too_many_arguments)]
            pub fn plain<$($gen)*>($($arg: $ty),*) -> $ret {
                super::$body::<$($garg)*>($($arg),*)
            }

            /// The AVX2 form.
            ///
            /// # Safety
            /// The CPU must support AVX2.
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2")]
            #[allow(dead_code, clippy::too_many_arguments)]
            pub unsafe fn avx2<$($gen)*>($($arg: $ty),*) -> $ret {
                super::$body::<$($garg)*>($($arg),*)
            }

            /// The AVX-512 form.
            ///
            /// # Safety
            /// The CPU must support AVX-512F.
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f")]
            #[allow(dead_code, clippy::too_many_arguments)]
            pub unsafe fn avx512<$($gen)*>($($arg: $ty),*) -> $ret {
                super::$body::<$($garg)*>($($arg),*)
            }

            /// `form`.
            ///
            /// # Safety
            /// The CPU must run `form` ([`Form::runs_here`]).
            #[allow(clippy::too_many_arguments)]
            unsafe fn run<$($gen)*>(form: $crate::vector::Form, $($arg: $ty),*) -> $ret {
                match form {
                    $crate::vector::Form::Plain => plain::<$($garg)*>($($arg),*),
                    // SAFETY: the caller's.
                    #[cfg(target_arch = "x86_64")]
                    $crate::vector::Form::Avx2 => unsafe { avx2::<$($garg)*>($($arg),*) },
                    // SAFETY: the caller's.
                    #[cfg(target_arch = "x86_64")]
                    $crate::vector::Form::Avx512 => unsafe { avx512::<$($garg)*>($($arg),*) },
                    #[cfg(not(target_arch = "x86_64"))]
                    _ => unreachable!("{form:?} runs on x86-64 only"),
                }
            }

            /// `form`, if this CPU runs it (tests compare the forms).
            #[allow(dead_code, clippy::too_many_arguments)]
            pub fn form<$($gen)*>(
                form: $crate::vector::Form,
                $($arg: $ty),*
            ) -> Option<$ret> {
                // SAFETY: runs_here checked the feature.
                form.runs_here().then(|| unsafe { run::<$($garg)*>(form, $($arg),*) })
            }

            /// The widest form this CPU runs.
            #[allow(clippy::too_many_arguments)]
            pub fn widest<$($gen)*>($($arg: $ty),*) -> $ret {
                // SAFETY: Form::widest runs here.
                unsafe { run::<$($garg)*>($crate::vector::Form::widest(), $($arg),*) }
            }
        }
    };
}
pub(crate) use vector_forms;

/// The compiled forms of a `vector_forms!` function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    Plain,
    Avx2,
    Avx512,
}

impl Form {
    pub const ALL: [Form; 3] = [Form::Plain, Form::Avx2, Form::Avx512];

    /// The widest form this CPU runs.
    pub fn widest() -> Form {
        [Form::Avx512, Form::Avx2]
            .into_iter()
            .find(|f| f.runs_here())
            .unwrap_or(Form::Plain)
    }

    /// Whether this CPU runs the form.
    pub fn runs_here(self) -> bool {
        match self {
            Form::Plain => true,
            #[cfg(target_arch = "x86_64")]
            Form::Avx2 => std::is_x86_feature_detected!("avx2"),
            #[cfg(target_arch = "x86_64")]
            Form::Avx512 => std::is_x86_feature_detected!("avx512f"),
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }
}
