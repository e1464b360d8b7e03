//! Writing to the terminal without failing: a closed pipe (`keisan info | head -1`), a
//! full disk behind a redirection (`2>/dev/full`) or a terminal that went away must not
//! end a run, whose results are files. `println!` and `eprintln!` panic then; these
//! macros drop what cannot be written.

/// `eprintln!` that never panics: a line on stderr, or nothing if stderr cannot take it.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// `eprint!` that never panics.
#[macro_export]
macro_rules! say_raw {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stderr(), $($arg)*);
    }};
}

/// `println!` that never panics: a line on stdout, or nothing if stdout cannot take it.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let mut o = std::io::stdout().lock();
        let _ = writeln!(o, $($arg)*).and_then(|_| o.flush());
    }};
}

/// `print!` that never panics.
#[macro_export]
macro_rules! out_raw {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let mut o = std::io::stdout().lock();
        let _ = write!(o, $($arg)*).and_then(|_| o.flush());
    }};
}
