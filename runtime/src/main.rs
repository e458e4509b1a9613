//! The `leasehold` command; see [`leasehold::cli`].

fn main() -> std::process::ExitCode {
    leasehold::cli::main()
}
