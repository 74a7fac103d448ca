//! `crivello`, the command line: a thin layer over the library, one module per subcommand
//! in `src/cli/`.

mod cli;

fn main() -> std::process::ExitCode {
    cli::run()
}
