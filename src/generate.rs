//! `fperf --generate WHAT`: the man page and the shell completions, written from the
//! same clap definition as `--help`, so the packaged copies never drift from it.
//!
//! The flag is parsed apart from the run's flags: it needs no role (-s, -c, --loopback)
//! and takes no other flag, and it stays out of `--help`, the man page and completions.

use crate::cli::Cli;
use clap::{CommandFactory, Parser, ValueEnum};
use clap_complete::Shell;
use std::ffi::OsString;
use std::io::{self, Write};
use std::process::ExitCode;

/// What `--generate` writes to stdout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Generate {
    /// The man page, in roff (`man -l -` reads it).
    Man,
    /// The man page of `fperf exporter` (fperf-exporter(1)).
    ManExporter,
    CompleteBash,
    CompleteZsh,
    CompleteFish,
}

/// `fperf --generate WHAT` and nothing else.
#[derive(Parser, Debug)]
#[command(name = "fperf")]
struct Args {
    #[arg(long, value_name = "WHAT")]
    generate: Generate,
}

/// Writes what `--generate` asks for when the arguments hold it; `None` otherwise.
pub fn run_if_asked(args: &[OsString]) -> Option<ExitCode> {
    let asked = args
        .iter()
        .skip(1)
        .any(|a| a.to_string_lossy().starts_with("--generate"));
    if !asked {
        return None;
    }
    let code = match Args::try_parse_from(args) {
        Err(e) => {
            let _ = e.print();
            ExitCode::from(2)
        }
        Ok(a) => match write(a.generate, Cli::command(), &mut io::stdout()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("fperf: error: --generate: {e}");
                ExitCode::FAILURE
            }
        },
    };
    Some(code)
}

/// Writes `what` for `cmd`, the whole command line definition.
fn write(what: Generate, mut cmd: clap::Command, out: &mut dyn Write) -> io::Result<()> {
    let shell = match what {
        Generate::Man => return clap_mangen::Man::new(cmd).render(out),
        Generate::ManExporter => {
            // Building the command names its subcommands as `fperf-exporter`.
            cmd.build();
            let exporter = cmd
                .find_subcommand("exporter")
                .cloned()
                .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no exporter command"))?;
            return clap_mangen::Man::new(exporter).render(out);
        }
        Generate::CompleteBash => Shell::Bash,
        Generate::CompleteZsh => Shell::Zsh,
        Generate::CompleteFish => Shell::Fish,
    };
    // clap_complete panics when its writer fails; a buffer cannot, and a closed stdout
    // is then an error like any other.
    let mut script = Vec::new();
    let name = cmd.get_name().to_string();
    clap_complete::generate(shell, &mut cmd, name, &mut script);
    out.write_all(&script)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generated(what: Generate) -> String {
        let mut out = Vec::new();
        write(what, Cli::command(), &mut out).expect("write to a buffer");
        String::from_utf8(out).expect("UTF-8")
    }

    #[test]
    fn the_man_page_has_every_flag_that_help_shows() {
        // roff writes a dash as `\-`.
        let man = generated(Generate::Man).replace("\\-", "-");
        let cmd = Cli::command();
        for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
            if let Some(long) = arg.get_long() {
                assert!(man.contains(&format!("--{long}")), "--{long} missing");
            }
        }
        assert!(!man.contains("--generate"));
        assert!(man.contains("fperf-exporter(1)"));
        let exporter = generated(Generate::ManExporter).replace("\\-", "-");
        assert!(exporter.starts_with(".ie"), "{exporter}");
        assert!(exporter.contains("fperf-exporter"));
        for flag in [
            "--listen",
            "--max-duration",
            "--max-probes",
            "--allow",
            "--auth-key",
        ] {
            assert!(exporter.contains(flag), "{flag} missing");
        }
    }

    #[test]
    fn each_shell_completes_the_flags_but_not_generate() {
        for what in [
            Generate::CompleteBash,
            Generate::CompleteZsh,
            Generate::CompleteFish,
        ] {
            let script = generated(what);
            assert!(script.contains("loopback"), "{what:?}");
            assert!(!script.contains("generate"), "{what:?}");
        }
    }

    #[test]
    fn generate_is_taken_alone() {
        let args = |a: &[&str]| -> Vec<OsString> { a.iter().map(OsString::from).collect() };
        assert_eq!(
            Args::try_parse_from(args(&["fperf", "--generate", "man"]))
                .expect("alone")
                .generate,
            Generate::Man
        );
        assert!(Args::try_parse_from(args(&["fperf", "--generate", "man", "-s"])).is_err());
        assert!(Args::try_parse_from(args(&["fperf", "--generate", "html"])).is_err());
        assert!(run_if_asked(&args(&["fperf", "-s", "-p", "5001"])).is_none());
    }
}
