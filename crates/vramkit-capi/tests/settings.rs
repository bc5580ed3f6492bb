use vramkit_capi::settings::{config_from_vars, parse_bytes, Backend, DEFAULT_SIM_CAPACITY_BYTES};

#[test]
fn backends_parse() {
    assert_eq!(Backend::parse("cuda"), Ok(Backend::Cuda));
    assert_eq!(Backend::parse("sim"), Ok(Backend::Sim { capacity_bytes: DEFAULT_SIM_CAPACITY_BYTES }));
    assert_eq!(Backend::parse(" sim:8GiB "), Ok(Backend::Sim { capacity_bytes: 8 << 30 }));
    assert_eq!(Backend::parse("sim:1073741824"), Ok(Backend::Sim { capacity_bytes: 1 << 30 }));
    assert!(Backend::parse("sim:lots").unwrap_err().contains("sim:8GiB"));
    assert!(Backend::parse("rocm").unwrap_err().starts_with("unknown backend \"rocm\""));
}

#[test]
fn byte_sizes_parse() {
    assert_eq!(parse_bytes("512"), Some(512));
    assert_eq!(parse_bytes("4K"), Some(4096));
    assert_eq!(parse_bytes("3MiB"), Some(3 << 20));
    assert_eq!(parse_bytes("2GB"), Some(2 << 30));
    assert_eq!(parse_bytes("1T"), Some(1 << 40));
    assert_eq!(parse_bytes("0"), None);
    assert_eq!(parse_bytes("1.5G"), None);
    assert_eq!(parse_bytes("99999999999T"), None);
}

#[test]
fn settings_come_from_the_first_variable_set() {
    let vars = |pairs: &'static [(&'static str, &'static str)]| {
        move |name: &str| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string())
    };
    let (config, warning) = config_from_vars(vars(&[
        ("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:128"),
        ("VRAMKIT_ALLOC_CONF", "expandable_segments:True"),
    ]));
    assert!(config.expandable_segments && config.max_split_size_bytes.is_none(), "not merged: VRAMKIT_ wins");
    assert!(warning.is_none());

    let (config, _) = config_from_vars(vars(&[("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:128")]));
    assert_eq!(config.max_split_size_bytes, Some(128 << 20));
    let (config, _) = config_from_vars(vars(&[("PYTORCH_ALLOC_CONF", "garbage_collection_threshold:0.6")]));
    assert_eq!(config.garbage_collection_threshold, 0.6);
}

#[test]
fn a_bad_string_gives_one_line_and_the_defaults() {
    let (config, warning) =
        config_from_vars(|name| (name == "VRAMKIT_ALLOC_CONF").then(|| "max_split_size_mb:5".to_string()));
    assert_eq!(config, vramkit_core::AllocatorConfig::pytorch_default());
    let warning = warning.expect("a warning");
    assert!(warning.starts_with("vramkit: ignoring VRAMKIT_ALLOC_CONF=\"max_split_size_mb:5\": "), "{warning}");
    assert!(warning.ends_with("; using PyTorch's default settings"), "{warning}");
    assert!(!warning.contains('\n'), "one line: {warning}");
}
