//! `vramkit convert`: pickle <-> JSON.

use crate::cli::ConvertArgs;
use crate::input::{load, CliError};
use std::process::ExitCode;

pub fn run(args: ConvertArgs) -> Result<ExitCode, CliError> {
    let file = load(&args.input)?;
    let format = match args.to.as_deref() {
        Some(f) => f.to_string(),
        None => match args.output.extension().and_then(|e| e.to_str()) {
            Some("json") => "json".into(),
            Some("pickle" | "pkl") => "pickle".into(),
            _ => {
                return Err(CliError::new(format!(
                    "{}: cannot tell the output format from the extension; name it .json or .pickle, or pass --to json|pickle",
                    args.output.display()
                )))
            }
        },
    };
    let out = std::fs::File::create(&args.output).map_err(|e| CliError::new(format!("{}: {e}", args.output.display())))?;
    let out = std::io::BufWriter::new(out);
    let written = if format == "json" { vramkit_trace::write_json(&file, out) } else { vramkit_trace::write_pickle(&file, out) };
    written.map_err(|e| CliError::new(format!("{}: {e}", args.output.display())))?;
    Ok(ExitCode::SUCCESS)
}
