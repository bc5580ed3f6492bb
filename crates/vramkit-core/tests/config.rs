//! `PYTORCH_CUDA_ALLOC_CONF` parsing, validation and writing (spec 1.3, 11, 12).

use proptest::prelude::*;
use vramkit_core::config::{AllocatorConfig, Backend, Compat, ConfigError};
use vramkit_core::rounding::{division_index, ROUNDUP_INTERVALS};

const MIB: u64 = 1 << 20;

fn parse(conf: &str) -> AllocatorConfig {
    AllocatorConfig::parse(conf).unwrap_or_else(|e| panic!("{conf:?} should parse: {e}"))
}

fn parse_as(conf: &str, compat: Compat) -> AllocatorConfig {
    AllocatorConfig::parse_with_compat(conf, compat).unwrap_or_else(|e| panic!("{conf:?} should parse: {e}"))
}

fn error_as(conf: &str, compat: Compat) -> ConfigError {
    match AllocatorConfig::parse_with_compat(conf, compat) {
        Ok(config) => panic!("{conf:?} should be refused, parsed as {config:?}"),
        Err(e) => e,
    }
}

fn error(conf: &str) -> ConfigError {
    error_as(conf, Compat::R26)
}

/// The error's message, checked to be one line that names every `needle`.
fn message(e: &ConfigError, needles: &[&str]) -> String {
    let text = e.to_string();
    assert!(!text.contains('\n'), "message is not one line: {text}");
    for needle in needles {
        assert!(text.contains(needle), "message {text:?} does not mention {needle:?}");
    }
    text
}

/// Asserts an `InvalidValue` for `key` with `value`, returns its PyTorch text.
fn invalid(e: &ConfigError, key: &str, value: &str) -> Option<String> {
    message(e, &[&format!("{key}:{value}"), "must be"]);
    match e {
        ConfigError::InvalidValue { key: k, value: v, pytorch_message, .. } => {
            assert_eq!((k.as_str(), v.as_str()), (key, value));
            if let Some(pytorch) = pytorch_message {
                message(e, &[pytorch.trim_end()]);
            }
            pytorch_message.clone()
        }
        other => panic!("expected InvalidValue, got {other:?}"),
    }
}

fn table(entries: [u64; ROUNDUP_INTERVALS]) -> [u64; ROUNDUP_INTERVALS] {
    entries
}

// --- defaults and syntax ------------------------------------------------------------

#[test]
fn empty_string_gives_the_defaults() {
    assert_eq!(parse(""), AllocatorConfig::pytorch_default());
    assert_eq!(parse("   \t\n"), AllocatorConfig::pytorch_default());
    assert_eq!(parse(""), AllocatorConfig::default());
    let r24 = parse_as("", Compat::R24);
    assert_eq!(r24, AllocatorConfig { compat: Compat::R24, ..AllocatorConfig::pytorch_default() });
}

#[test]
fn defaults_are_pytorchs() {
    let c = AllocatorConfig::pytorch_default();
    assert_eq!(c.max_split_size_bytes, None);
    assert_eq!(c.max_split_size(), u64::MAX);
    assert_eq!(c.max_non_split_rounding_bytes, 20 * MIB);
    assert_eq!(c.large_segment_size_bytes, 20 * MIB);
    assert_eq!(c.roundup_power2_divisions, [0; ROUNDUP_INTERVALS]);
    assert_eq!(c.garbage_collection_threshold, 0.0);
    assert!(!c.expandable_segments);
    assert_eq!(c.per_process_memory_fraction, 1.0);
    assert!(!c.release_lock_on_cudamalloc);
    assert!(!c.graph_capture_record_stream_reuse);
    assert_eq!(c.backend, Backend::Native);
    assert!(!c.pinned_use_cuda_host_register);
    assert_eq!(c.pinned_num_register_threads, 1);
    assert!(!c.pinned_use_background_threads);
    assert_eq!(c.pinned_reserve_segment_size_mb, 0);
    assert_eq!(c.compat, Compat::R26);
    assert_eq!(c.to_conf_string(), "");
    for compat in [Compat::R24, Compat::V2_8, Compat::R26] {
        AllocatorConfig { compat, ..c.clone() }.validate().unwrap();
    }
}

#[test]
fn whitespace_is_dropped_everywhere_as_in_pytorch() {
    let expected = parse("max_split_size_mb:128,expandable_segments:True");
    assert_eq!(parse(" max_split_size_mb : 128 ,\texpandable_segments:\nTrue "), expected);
    assert_eq!(parse("max_split _size_mb:1 28,expandable_segments:True\r\n"), expected);
    assert_eq!(
        parse("roundup_power2_divisions: [ 64 : 8 , > : 1 ]").roundup_power2_divisions,
        parse("roundup_power2_divisions:[64:8,>:1]").roundup_power2_divisions
    );
}

#[test]
fn trailing_commas_are_accepted() {
    assert_eq!(parse("expandable_segments:True,"), parse("expandable_segments:True"));
    assert_eq!(
        parse("roundup_power2_divisions:[64:8,],").roundup_power2_divisions,
        parse("roundup_power2_divisions:[64:8]").roundup_power2_divisions
    );
}

#[test]
fn a_repeated_key_takes_its_last_value() {
    assert_eq!(parse("max_split_size_mb:100,max_split_size_mb:200").max_split_size_bytes, Some(200 * MIB));
}

#[test]
fn syntax_errors_say_where() {
    let e = error("max_split_size_mb:128:5");
    message(&e, &["character 21", "expected ','", "found ':'", "max_split_size_mb:128:5"]);
    assert!(matches!(e, ConfigError::Syntax { position: 21, .. }));

    let e = error(",max_split_size_mb:128");
    message(&e, &["character 0", "expected a key", "found ','"]);

    let e = error("a:b,,c:d");
    assert!(matches!(e, ConfigError::Syntax { position: 4, .. }), "{e:?}");

    let e = error("roundup_power2_divisions:[64:8");
    message(&e, &["expected ',' or ']'", "end of input", "character 30"]);

    let e = error("roundup_power2_divisions:[64]");
    message(&e, &["expected ':'", "found ']'"]);

    let e = error("roundup_power2_divisions:[64:]");
    message(&e, &["expected a value", "found ']'"]);

    let e = error("max_split_size_mb[128]");
    message(&e, &["expected ':'", "found '['", "Error parsing CachingAllocator settings, expected :"]);

    let e = error("max_split_size_mb::128");
    message(&e, &["expected a value", "found ':'"]);

    // Positions count characters, not bytes.
    let e = error("é:1:2");
    assert!(matches!(e, ConfigError::Syntax { position: 3, .. }), "{e:?}");
}

#[test]
fn a_key_without_a_value_is_missing_value() {
    for conf in ["max_split_size_mb", "max_split_size_mb:", "max_split_size_mb:,expandable_segments:True"] {
        let e = error(conf);
        assert!(matches!(&e, ConfigError::MissingValue { key, .. } if key == "max_split_size_mb"), "{e:?}");
        message(&e, &["max_split_size_mb", "no value", "Error, expecting max_split_size_mb value"]);
    }
}

#[test]
fn a_list_where_one_value_belongs_is_refused() {
    let e = error("max_split_size_mb:[1:2]");
    invalid(&e, "max_split_size_mb", "[1:2]");
    message(&e, &["not a list"]);
}

// --- unknown keys -------------------------------------------------------------------

#[test]
fn unknown_keys_suggest_the_closest_known_key() {
    let e = error("max_split_size:128");
    let text = message(&e, &["'max_split_size'", "did you mean 'max_split_size_mb'?"]);
    assert!(text.contains("Unrecognized key 'max_split_size' in CUDA allocator config."), "{text}");
    match &e {
        ConfigError::UnknownKey { key, suggestion, known, .. } => {
            assert_eq!(key, "max_split_size");
            assert_eq!(suggestion.as_deref(), Some("max_split_size_mb"));
            assert!(known.contains(&"large_segment_size_mb"));
        }
        other => panic!("{other:?}"),
    }

    message(&error("garbage_collect_threshold:0.5"), &["did you mean 'garbage_collection_threshold'?"]);
    // A lost ':' glues key and value together.
    message(&error("expandable_segmentsTrue"), &["did you mean 'expandable_segments'?"]);
}

#[test]
fn unknown_keys_far_from_any_list_the_known_keys() {
    let e = error("foo:1");
    message(&e, &["'foo'", "remove it", "max_split_size_mb", "pinned_reserve_segment_size_mb"]);
    assert!(matches!(&e, ConfigError::UnknownKey { suggestion: None, .. }));
    let r24 = error_as("foo:1", Compat::R24);
    message(&r24, &["Unrecognized CachingAllocator option: foo"]);
    // R24 has no max_non_split_rounding_mb, so it is not offered.
    assert!(!r24.to_string().contains("max_non_split_rounding_mb"), "{r24}");
}

#[test]
fn keys_of_newer_generations_are_unknown_to_older_ones() {
    let e = error_as("max_non_split_rounding_mb:40", Compat::R24);
    message(&e, &["'max_non_split_rounding_mb'", "Compat::has_max_non_split_rounding"]);
    assert!(matches!(&e, ConfigError::UnknownKey { available_with: Some(_), .. }));
    for compat in [Compat::R24, Compat::V2_8] {
        let e = error_as("large_segment_size_mb:40", compat);
        message(&e, &["'large_segment_size_mb'", "Compat::has_large_segment_size"]);
    }
    assert_eq!(parse_as("max_non_split_rounding_mb:40", Compat::V2_8).max_non_split_rounding_bytes, 40 * MIB);
}

#[test]
fn newest_pytorch_keys_are_accepted_and_ignored() {
    let conf = "throw_on_cudamalloc_oom:True,expandable_segments_reserve:0.5,\
                expandable_segments_reserve_by_class:[activations:4G,weights:0.25],\
                pinned_free_catch_all:True,pinned_max_round_threshold_mb:64,pinned_max_cached_size_mb:512";
    for compat in [Compat::R24, Compat::V2_8, Compat::R26] {
        assert_eq!(parse_as(conf, compat), parse_as("", compat));
    }
    assert!(matches!(error("throw_on_cudamalloc_oom"), ConfigError::MissingValue { .. }));
}

// --- each key ---------------------------------------------------------------------------

#[test]
fn backend() {
    assert_eq!(parse("backend:native").backend, Backend::Native);
    assert_eq!(parse("backend:cudaMallocAsync").backend, Backend::CudaMallocAsync);
    let e = error("backend:cudamallocasync");
    let pytorch = invalid(&e, "backend", "cudamallocasync");
    assert_eq!(pytorch.as_deref(), Some("Unknown allocator backend, options are native and cudaMallocAsync"));
    message(&e, &["native or cudaMallocAsync"]);
}

#[test]
fn max_split_size_mb() {
    assert_eq!(parse("max_split_size_mb:128").max_split_size_bytes, Some(128 * MIB));
    assert_eq!(parse("max_split_size_mb:128").max_split_size(), 128 * MIB);
    // PyTorch clamps so that MB * 2^20 fits a size_t.
    let huge = parse("max_split_size_mb:18446744073709551615");
    assert_eq!(huge.max_split_size_bytes, Some((u64::MAX >> 20) << 20));

    let e = error("max_split_size_mb:10");
    assert_eq!(
        e.to_string(),
        "max_split_size_mb:10 is invalid: must be >= 20 (MB) \
         (PyTorch: \"CachingAllocator option max_split_size_mb too small, must be >= 20\")"
    );
    for bad in ["abc", "-1", "20abc", "1.5", "18446744073709551616"] {
        let e = error(&format!("max_split_size_mb:{bad}"));
        invalid(&e, "max_split_size_mb", bad);
        message(&e, &["whole number of MB"]);
    }
}

#[test]
fn max_split_size_mb_20_is_allowed_in_r26_only() {
    assert_eq!(parse("max_split_size_mb:20").max_split_size_bytes, Some(20 * MIB));
    for compat in [Compat::R24, Compat::V2_8] {
        let e = error_as("max_split_size_mb:20", compat);
        let pytorch = invalid(&e, "max_split_size_mb", "20");
        assert_eq!(
            pytorch.as_deref(),
            Some("CachingAllocator option max_split_size_mb too small, must be > 20")
        );
        message(&e, &["must be > 20 (MB)"]);
        assert_eq!(parse_as("max_split_size_mb:21", compat).max_split_size_bytes, Some(21 * MIB));
    }
    let e = error("max_split_size_mb:19");
    invalid(&e, "max_split_size_mb", "19");
}

#[test]
fn max_non_split_rounding_mb() {
    assert_eq!(parse("max_non_split_rounding_mb:20").max_non_split_rounding_bytes, 20 * MIB);
    assert_eq!(parse("max_non_split_rounding_mb:64").max_non_split_rounding_bytes, 64 * MIB);
    assert_eq!(parse("max_non_split_rounding_mb:64").oversize_tolerance(), 64 * MIB);
    let e = error("max_non_split_rounding_mb:19");
    let pytorch = invalid(&e, "max_non_split_rounding_mb", "19");
    assert_eq!(
        pytorch.as_deref(),
        Some("CachingAllocator option max_non_split_rounding_mb too small, must be >= 20")
    );
    let e = error_as("max_non_split_rounding_mb:20", Compat::V2_8);
    let pytorch = invalid(&e, "max_non_split_rounding_mb", "20");
    assert_eq!(
        pytorch.as_deref(),
        Some("CachingAllocator option max_non_split_rounding_mb too small, must be > 20")
    );
}

#[test]
fn large_segment_size_mb() {
    let c = parse("large_segment_size_mb:64");
    assert_eq!(c.large_segment_size_bytes, 64 * MIB);
    // The default of max_non_split_rounding follows it.
    assert_eq!(c.max_non_split_rounding_bytes, 64 * MIB);
    assert_eq!(parse("large_segment_size_mb:11").large_segment_size_bytes, 11 * MIB);
    let e = error("large_segment_size_mb:10");
    let pytorch = invalid(&e, "large_segment_size_mb", "10");
    assert_eq!(pytorch.as_deref(), Some("CachingAllocator option large_segment_size_mb must be > 10 MB"));
    message(&e, &["must be > 10 (MB)"]);
}

#[test]
fn large_segment_size_mb_is_read_before_every_other_key() {
    // The floors of the split sizes are the new large_segment_size, wherever it stands.
    let e = error("max_split_size_mb:30,large_segment_size_mb:40");
    invalid(&e, "max_split_size_mb", "30");
    message(&e, &["must be >= 40 (MB, large_segment_size_mb)", "must be >= 40\")"]);
    let c = parse("max_split_size_mb:40,max_non_split_rounding_mb:50,large_segment_size_mb:40");
    assert_eq!(c.max_split_size_bytes, Some(40 * MIB));
    assert_eq!(c.max_non_split_rounding_bytes, 50 * MIB);
    assert_eq!(c.large_segment_size_bytes, 40 * MIB);
    let e = error("max_non_split_rounding_mb:30,large_segment_size_mb:40");
    invalid(&e, "max_non_split_rounding_mb", "30");
    // A large_segment_size error comes first even if it is written last.
    let e = error("max_split_size_mb:5,large_segment_size_mb:5");
    invalid(&e, "large_segment_size_mb", "5");
}

#[test]
fn garbage_collection_threshold() {
    assert_eq!(parse("garbage_collection_threshold:0.6").garbage_collection_threshold, 0.6);
    assert_eq!(parse("garbage_collection_threshold:1e-3").garbage_collection_threshold, 0.001);
    for bad in ["0", "1", "1.5", "-0.1", "0.0", "nan", "abc"] {
        let e = error(&format!("garbage_collection_threshold:{bad}"));
        let pytorch = invalid(&e, "garbage_collection_threshold", &e_value(&e));
        if bad != "abc" {
            assert_eq!(
                pytorch.as_deref(),
                Some("garbage_collect_threshold is invalid, set it in (0.0, 1.0)"),
                "{bad}"
            );
        }
    }
    let e = error_as("garbage_collection_threshold:0", Compat::R24);
    assert_eq!(
        invalid(&e, "garbage_collection_threshold", "0").as_deref(),
        Some("garbage_collect_threshold too small, set it 0.0~1.0")
    );
    let e = error_as("garbage_collection_threshold:1", Compat::R24);
    assert_eq!(
        invalid(&e, "garbage_collection_threshold", "1").as_deref(),
        Some("garbage_collect_threshold too big, set it 0.0~1.0")
    );
}

/// The value an `InvalidValue` reports (floats are reported as parsed, e.g. `0.0` as `0`).
fn e_value(e: &ConfigError) -> String {
    match e {
        ConfigError::InvalidValue { value, .. } => value.clone(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn expandable_segments() {
    assert!(parse("expandable_segments:True").expandable_segments);
    assert!(!parse("expandable_segments:False").expandable_segments);
    let e = error("expandable_segments:true");
    let pytorch = invalid(&e, "expandable_segments", "true");
    assert_eq!(
        pytorch.as_deref(),
        Some("Expected 'True' or 'False' at index 2 in ConfigTokenizer but got 'true'")
    );
    message(&e, &["True or False (case-sensitive)"]);
    let e = error_as("max_split_size_mb:100,expandable_segments:1", Compat::R24);
    let pytorch = invalid(&e, "expandable_segments", "1");
    assert_eq!(pytorch.as_deref(), Some("Expected a single True/False argument for expandable_segments"));
}

#[test]
fn per_process_memory_fraction() {
    assert_eq!(parse("per_process_memory_fraction:0.5").per_process_memory_fraction, 0.5);
    assert_eq!(parse("per_process_memory_fraction:0").per_process_memory_fraction, 0.0);
    assert_eq!(parse("per_process_memory_fraction:1").per_process_memory_fraction, 1.0);
    for bad in ["1.5", "-0.1", "nan"] {
        let e = error(&format!("per_process_memory_fraction:{bad}"));
        let pytorch = invalid(&e, "per_process_memory_fraction", &e_value(&e));
        assert_eq!(pytorch.as_deref(), Some("per_process_memory_fraction is invalid, set it in [0.0, 1.0]"));
        message(&e, &["in [0.0, 1.0]"]);
    }
}

#[test]
fn boolean_keys_and_their_aliases() {
    let c = parse(
        "release_lock_on_cudamalloc:True,graph_capture_record_stream_reuse:True,\
         pinned_use_cuda_host_register:True,pinned_use_background_threads:True",
    );
    assert!(c.release_lock_on_cudamalloc);
    assert!(c.graph_capture_record_stream_reuse);
    assert!(c.pinned_use_cuda_host_register);
    assert!(c.pinned_use_background_threads);
    assert!(parse("release_lock_on_hipmalloc:True").release_lock_on_cudamalloc);
    assert!(parse("pinned_use_hip_host_register:True").pinned_use_cuda_host_register);
    for key in [
        "release_lock_on_cudamalloc",
        "graph_capture_record_stream_reuse",
        "pinned_use_cuda_host_register",
        "pinned_use_background_threads",
    ] {
        invalid(&error(&format!("{key}:yes")), key, "yes");
    }
    // An alias is reported under PyTorch's main name.
    invalid(&error("release_lock_on_hipmalloc:yes"), "release_lock_on_cudamalloc", "yes");
}

#[test]
fn pinned_num_register_threads() {
    assert_eq!(parse("pinned_num_register_threads:1").pinned_num_register_threads, 1);
    assert_eq!(parse("pinned_num_register_threads:128").pinned_num_register_threads, 128);
    let e = error("pinned_num_register_threads:3");
    assert_eq!(
        invalid(&e, "pinned_num_register_threads", "3").as_deref(),
        Some("Number of register threads has to be power of 2")
    );
    let e = error("pinned_num_register_threads:0");
    invalid(&e, "pinned_num_register_threads", "0");
    let e = error("pinned_num_register_threads:256");
    assert_eq!(
        invalid(&e, "pinned_num_register_threads", "256").as_deref(),
        Some("Number of register threads should be less than or equal to 128")
    );
}

#[test]
fn pinned_reserve_segment_size_mb() {
    assert_eq!(parse("pinned_reserve_segment_size_mb:64").pinned_reserve_segment_size_mb, 64);
    let e = error("pinned_reserve_segment_size_mb:0");
    assert_eq!(
        invalid(&e, "pinned_reserve_segment_size_mb", "0").as_deref(),
        Some("Pinned reserve segment size has to be greater than 0")
    );
}

// --- roundup_power2_divisions (spec 1.3) --------------------------------------------------

#[test]
fn roundup_single_value_fills_every_class() {
    assert_eq!(parse("roundup_power2_divisions:4").roundup_power2_divisions, [4; ROUNDUP_INTERVALS]);
    assert_eq!(parse("roundup_power2_divisions:1").roundup_power2_divisions, [1; ROUNDUP_INTERVALS]);
    for bad in ["0", "3", "-4", "four"] {
        let e = error(&format!("roundup_power2_divisions:{bad}"));
        invalid(&e, "roundup_power2_divisions", bad);
    }
    let e = error("roundup_power2_divisions:0");
    assert_eq!(
        invalid(&e, "roundup_power2_divisions", "0").as_deref(),
        Some("For roundups, the divisions has to be power of 2 ")
    );
}

/// The newest PyTorch unit test (spec 1.3), with every entry asserted.
#[test]
fn roundup_list_first_vector_of_the_spec() {
    let conf = "roundup_power2_divisions:[64:8,128:2,256:4,512:2,1024:4,>:1]";
    let r26 = parse(conf).roundup_power2_divisions;
    assert_eq!(r26, table([8, 8, 8, 8, 8, 8, 8, 2, 4, 2, 4, 1, 1, 1, 1, 1]));
    for (mib, divisions) in
        [(32, 8), (64, 8), (128, 2), (256, 4), (512, 2), (1024, 4), (2048, 1), (4096, 1), (8192, 1)]
    {
        assert_eq!(r26[division_index(mib * MIB)], divisions, "{mib} MiB");
    }
    // Older parsers let `>` overwrite the last listed class (1024).
    let r24 = parse_as(conf, Compat::R24).roundup_power2_divisions;
    assert_eq!(r24, table([8, 8, 8, 8, 8, 8, 8, 2, 4, 2, 1, 1, 1, 1, 1, 1]));
}

#[test]
fn roundup_list_second_vector_of_the_spec() {
    let conf = "roundup_power2_divisions:[128:8,256:16,512:1,2048:8,>:2]";
    let r26 = parse(conf).roundup_power2_divisions;
    assert_eq!(r26, table([8, 8, 8, 8, 8, 8, 8, 8, 16, 1, 0, 8, 2, 2, 2, 2]));
    for (mib, divisions) in [(64, 8), (128, 8), (256, 16), (512, 1), (1024, 0), (2048, 8), (4096, 2)] {
        assert_eq!(r26[division_index(mib * MIB)], divisions, "{mib} MiB");
    }
    let v28 = parse_as(conf, Compat::V2_8).roundup_power2_divisions;
    assert_eq!(v28, table([8, 8, 8, 8, 8, 8, 8, 8, 16, 1, 0, 2, 2, 2, 2, 2]));
}

/// The docs' example, which the code reads one interval off from the prose.
#[test]
fn roundup_list_docs_example_follows_the_code() {
    let conf = "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]";
    assert_eq!(parse(conf).roundup_power2_divisions, table([1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 4, 8, 8, 8, 8, 8]));
    assert_eq!(
        parse_as(conf, Compat::R24).roundup_power2_divisions,
        table([1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 8, 8, 8, 8, 8, 8])
    );
}

#[test]
fn roundup_list_edge_cases() {
    // An empty list is all 0.
    assert_eq!(parse("roundup_power2_divisions:[]").roundup_power2_divisions, [0; ROUNDUP_INTERVALS]);
    // `>` with nothing listed before fills from index 1 (R26) or 0 (older).
    assert_eq!(
        parse("roundup_power2_divisions:[>:4]").roundup_power2_divisions,
        table([0, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4])
    );
    assert_eq!(
        parse_as("roundup_power2_divisions:[>:4]", Compat::R24).roundup_power2_divisions,
        [4; ROUNDUP_INTERVALS]
    );
    // Keys beyond 32 GiB clamp to the last class; key 1 is the first class.
    assert_eq!(
        parse("roundup_power2_divisions:[1:2,65536:8]").roundup_power2_divisions,
        table([2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 8])
    );
    // Keys are applied in the order written: only the first fills below itself.
    assert_eq!(
        parse("roundup_power2_divisions:[256:2,64:8]").roundup_power2_divisions,
        table([2, 2, 2, 2, 2, 2, 8, 2, 2, 0, 0, 0, 0, 0, 0, 0])
    );
    // 0 disables rounding for a class in the list form.
    assert_eq!(
        parse("roundup_power2_divisions:[2:0,4:4]").roundup_power2_divisions,
        table([0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0])
    );
}

#[test]
fn roundup_list_errors() {
    let e = error("roundup_power2_divisions:[64:8, 128:3]");
    let pytorch = invalid(&e, "roundup_power2_divisions", "[64:8,128:3]");
    message(&e, &["which 128:3 is not"]);
    assert_eq!(
        pytorch.as_deref(),
        Some("For roundups, the divisions has to be power of 2 or 0 to disable roundup ")
    );
    for bad_key in ["3", "0", "<", "big"] {
        let e = error(&format!("roundup_power2_divisions:[{bad_key}:4]"));
        let pytorch = invalid(&e, "roundup_power2_divisions", &format!("[{bad_key}:4]"));
        assert_eq!(pytorch.as_deref(), Some("For roundups, the intervals have to be power of 2 "));
    }
    invalid(&error("roundup_power2_divisions:[>:x]"), "roundup_power2_divisions", "[>:x]");
}

#[test]
fn roundup_is_replaced_whole_by_an_update() {
    let mut c = parse("roundup_power2_divisions:4");
    c.update("roundup_power2_divisions:[1024:2]").unwrap();
    assert_eq!(c.roundup_power2_divisions, table([2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0]));
}

// --- update vs PyTorch's setter ---------------------------------------------------------------

fn configured() -> AllocatorConfig {
    parse(
        "max_split_size_mb:128,max_non_split_rounding_mb:64,roundup_power2_divisions:4,\
         garbage_collection_threshold:0.8,per_process_memory_fraction:0.5,release_lock_on_cudamalloc:True",
    )
}

#[test]
fn update_changes_only_the_keys_it_names() {
    let mut c = configured();
    c.update("expandable_segments:True").unwrap();
    assert_eq!(c, AllocatorConfig { expandable_segments: true, ..configured() });
    c.update("max_split_size_mb:256, garbage_collection_threshold:0.5").unwrap();
    assert_eq!(
        c,
        AllocatorConfig {
            expandable_segments: true,
            max_split_size_bytes: Some(256 * MIB),
            garbage_collection_threshold: 0.5,
            ..configured()
        }
    );
    c.update("").unwrap();
    assert_eq!(c.max_split_size_bytes, Some(256 * MIB));
}

#[test]
fn a_failed_update_changes_nothing() {
    let mut c = configured();
    let e = c.update("expandable_segments:True,max_split_size_mb:1").unwrap_err();
    invalid(&e, "max_split_size_mb", "1");
    assert_eq!(c, configured());
    assert!(c.set_allocator_settings_pytorch("expandable_segments:maybe").is_err());
    assert_eq!(c, configured());
}

#[test]
fn update_moves_an_unset_max_non_split_rounding_with_large_segment_size() {
    let mut c = AllocatorConfig::pytorch_default();
    c.update("large_segment_size_mb:32").unwrap();
    assert_eq!(c.max_non_split_rounding_bytes, 32 * MIB);
    c.update("large_segment_size_mb:24").unwrap();
    assert_eq!(c.max_non_split_rounding_bytes, 24 * MIB);
    // An explicit value stays, and must still clear the new floor.
    c.update("max_non_split_rounding_mb:48").unwrap();
    c.update("large_segment_size_mb:40").unwrap();
    assert_eq!(c.max_non_split_rounding_bytes, 48 * MIB);
    let e = c.update("large_segment_size_mb:64").unwrap_err();
    invalid(&e, "max_non_split_rounding_mb", "48");
    message(&e, &[">= 64"]);
    c.update("large_segment_size_mb:64,max_non_split_rounding_mb:64").unwrap();
    // An unnamed max_split_size below a raised floor is an error too.
    let mut c = parse("max_split_size_mb:30");
    invalid(&c.update("large_segment_size_mb:40").unwrap_err(), "max_split_size_mb", "30");
}

#[test]
fn pytorch_setter_resets_split_roundup_and_gc_first() {
    let mut c = configured();
    c.set_allocator_settings_pytorch("expandable_segments:False").unwrap();
    assert_eq!(
        c,
        AllocatorConfig {
            max_split_size_bytes: None,
            max_non_split_rounding_bytes: 20 * MIB,
            roundup_power2_divisions: [0; ROUNDUP_INTERVALS],
            garbage_collection_threshold: 0.0,
            ..configured()
        }
    );
    // Other keys keep their values.
    assert_eq!(c.per_process_memory_fraction, 0.5);
    assert!(c.release_lock_on_cudamalloc);

    let mut c = configured();
    c.set_allocator_settings_pytorch("max_split_size_mb:64,expandable_segments:True").unwrap();
    assert_eq!(c.max_split_size_bytes, Some(64 * MIB));
    assert!(c.expandable_segments);
    assert_eq!(c.roundup_power2_divisions, [0; ROUNDUP_INTERVALS]);
}

#[test]
fn pytorch_setter_resets_max_non_split_rounding_to_large_segment_size_in_r26() {
    let mut c = parse("large_segment_size_mb:32,max_non_split_rounding_mb:64");
    c.set_allocator_settings_pytorch("").unwrap();
    assert_eq!(c.large_segment_size_bytes, 32 * MIB);
    assert_eq!(c.max_non_split_rounding_bytes, 32 * MIB);
    c.set_allocator_settings_pytorch("large_segment_size_mb:48").unwrap();
    assert_eq!(c.max_non_split_rounding_bytes, 48 * MIB);
    // The 2.8-era parser did not reset it.
    let mut c = parse_as("max_non_split_rounding_mb:64", Compat::V2_8);
    c.set_allocator_settings_pytorch("expandable_segments:True").unwrap();
    assert_eq!(c.max_non_split_rounding_bytes, 64 * MIB);
}

#[test]
fn pytorch_setter_cannot_change_the_backend() {
    let mut c = AllocatorConfig::pytorch_default();
    c.set_allocator_settings_pytorch("backend:native").unwrap();
    let e = c.set_allocator_settings_pytorch("backend:cudaMallocAsync").unwrap_err();
    let pytorch = invalid(&e, "backend", "cudaMallocAsync");
    assert_eq!(
        pytorch.as_deref(),
        Some("Allocator backend parsed at runtime != allocator backend parsed at load time")
    );
    // vramkit's own update may.
    c.update("backend:cudaMallocAsync").unwrap();
    assert_eq!(c.backend, Backend::CudaMallocAsync);
}

// --- spec examples and generations --------------------------------------------------------------

#[test]
fn spec_examples() {
    // 13.1 C.
    assert_eq!(parse("max_split_size_mb:100").max_split_size_bytes, Some(100 * MIB));
    // 3.3: 21 is the smallest max_split_size older PyTorch takes.
    assert_eq!(parse_as("max_split_size_mb:21", Compat::R24).max_split_size_bytes, Some(21 * MIB));
    // 14: the crash reports' settings.
    let c = parse("expandable_segments:True,max_split_size_mb:32");
    assert!(c.expandable_segments);
    assert_eq!(c.max_split_size_bytes, Some(32 * MIB));
    // The example in PyTorch's header (lower-case `true` is refused there too).
    let e = error(
        "max_split_size_mb:100,max_non_split_rounding_mb:20,garbage_collection_threshold:0.5,\
         roundup_power2_divisions:[64:8,256:4,1024:4,>:1],expandable_segments:true,pinned_use_background_threads:true",
    );
    invalid(&e, "expandable_segments", "true");
}

#[test]
fn r24_and_r26_differ_where_the_spec_says() {
    // max_split_size floor, `>` in the list, and which keys exist.
    assert!(AllocatorConfig::parse_with_compat("max_split_size_mb:20", Compat::R24).is_err());
    assert!(AllocatorConfig::parse_with_compat("max_split_size_mb:20", Compat::R26).is_ok());
    let conf = "roundup_power2_divisions:[64:8,>:1]";
    assert_eq!(parse_as(conf, Compat::R24).roundup_power2_divisions[6], 1);
    assert_eq!(parse_as(conf, Compat::R26).roundup_power2_divisions[6], 8);
    assert!(AllocatorConfig::parse_with_compat("max_non_split_rounding_mb:40", Compat::R24).is_err());
    assert!(AllocatorConfig::parse_with_compat("large_segment_size_mb:40", Compat::R24).is_err());
    assert!(AllocatorConfig::parse_with_compat("large_segment_size_mb:40", Compat::R26).is_ok());
}

// --- writing and the typed builder ------------------------------------------------------------

#[test]
fn to_conf_string_examples() {
    assert_eq!(AllocatorConfig::pytorch_default().to_conf_string(), "");
    assert_eq!(parse("expandable_segments:True").to_conf_string(), "expandable_segments:True");
    assert_eq!(
        parse("expandable_segments:True, max_split_size_mb:128, roundup_power2_divisions:4").to_conf_string(),
        "max_split_size_mb:128,roundup_power2_divisions:4,expandable_segments:True"
    );
    assert_eq!(
        parse("roundup_power2_divisions:[64:8,128:2,256:4,512:2,1024:4,>:1]").to_conf_string(),
        "roundup_power2_divisions:[64:8,128:2,256:4,512:2,1024:4,>:1]"
    );
    assert_eq!(
        parse("roundup_power2_divisions:[128:8,256:16,512:1,2048:8,>:2]").to_conf_string(),
        "roundup_power2_divisions:[128:8,256:16,512:1,2048:8,>:2]"
    );
    // Under R24 the class before `>` must be written with the tail's value.
    let r24 = parse_as("roundup_power2_divisions:[128:8,256:16,512:1,2048:8,>:2]", Compat::R24);
    assert_eq!(r24.to_conf_string(), "roundup_power2_divisions:[128:8,256:16,512:1,2048:2,>:2]");
    // max_non_split_rounding at its default (= large_segment_size) is left out.
    assert_eq!(parse("large_segment_size_mb:32").to_conf_string(), "large_segment_size_mb:32");
    // Defaults written out explicitly are still defaults.
    assert_eq!(
        parse("expandable_segments:False,per_process_memory_fraction:1.0,backend:native").to_conf_string(),
        ""
    );
}

#[test]
fn builder_checks_what_the_parser_checks() {
    let e = AllocatorConfig::builder().max_split_size_bytes(Some(10 * MIB)).build().unwrap_err();
    assert_eq!(e, error("max_split_size_mb:10"));
    let e = AllocatorConfig::builder().max_split_size_bytes(Some(100 * MIB + 1)).build().unwrap_err();
    invalid(&e, "max_split_size_mb", "104857601 bytes");
    message(&e, &["whole number of MiB"]);
    let e = AllocatorConfig::builder().garbage_collection_threshold(1.0).build().unwrap_err();
    invalid(&e, "garbage_collection_threshold", "1");
    let e = AllocatorConfig::builder().per_process_memory_fraction(f64::NAN).build().unwrap_err();
    invalid(&e, "per_process_memory_fraction", "NaN");
    let e = AllocatorConfig::builder().roundup_power2_divisions(3).build().unwrap_err();
    invalid(&e, "roundup_power2_divisions", "3 (size class 0)");
    let e = AllocatorConfig::builder().large_segment_size_bytes(8 * MIB).build().unwrap_err();
    invalid(&e, "large_segment_size_mb", "8");
    let e = AllocatorConfig::builder()
        .compat(Compat::R24)
        .large_segment_size_bytes(40 * MIB)
        .build()
        .unwrap_err();
    invalid(&e, "large_segment_size_mb", "40");
    message(&e, &["Compat::has_large_segment_size"]);
    let e = AllocatorConfig::builder()
        .compat(Compat::R24)
        .max_non_split_rounding_bytes(40 * MIB)
        .build()
        .unwrap_err();
    invalid(&e, "max_non_split_rounding_mb", "40");
    let e = AllocatorConfig { pinned_num_register_threads: 6, ..AllocatorConfig::default() }
        .validate()
        .unwrap_err();
    invalid(&e, "pinned_num_register_threads", "6");

    // Values the string form cannot write but which are defaults are fine.
    let v28 = AllocatorConfig::builder().compat(Compat::V2_8).build().unwrap();
    assert_eq!(v28.max_non_split_rounding_bytes, 20 * MIB);
    let ok = AllocatorConfig::builder()
        .max_split_size_bytes(Some(20 * MIB))
        .roundup_power2_division_table([0, 1, 2, 4, 8, 16, 32, 64, 0, 0, 0, 0, 0, 0, 0, 1024])
        .garbage_collection_threshold(0.25)
        .expandable_segments(true)
        .per_process_memory_fraction(0.0)
        .release_lock_on_cudamalloc(true)
        .build()
        .unwrap();
    assert_eq!(AllocatorConfig::parse(&ok.to_conf_string()).unwrap(), ok);
}

// --- properties -----------------------------------------------------------------------------------

fn compat_strategy() -> BoxedStrategy<Compat> {
    prop_oneof![
        Just(Compat::R24),
        Just(Compat::V2_8),
        Just(Compat::R26),
        Just(Compat::V2_13),
        Just(Compat::V2_12),
        any::<[bool; 11]>().prop_map(|b| Compat {
            roundup_gt_overwrites_last: b[0],
            max_split_size_strictly_above_20: b[1],
            fixed_oversize_tolerance: b[2],
            has_max_non_split_rounding: b[3],
            has_large_segment_size: b[4],
            fraction_limit_when_ever_set: b[5],
            release_considers_expandable: b[6],
            private_pool_first_registered: b[7],
            size_ties: if b[8] { vramkit_core::config::SizeTies::SegmentAge } else { vramkit_core::config::SizeTies::Address },
            expandable_in_private_pools: b[9],
            capture_guards_ask_the_stream: b[10],
        }),
    ]
    .boxed()
}

fn divisions_strategy() -> BoxedStrategy<u64> {
    prop_oneof![Just(0u64), Just(1), Just(2), Just(8), (0u32..40).prop_map(|shift| 1u64 << shift)].boxed()
}

fn table_strategy() -> BoxedStrategy<[u64; ROUNDUP_INTERVALS]> {
    prop_oneof![
        divisions_strategy().prop_map(|d| [d; ROUNDUP_INTERVALS]),
        prop::array::uniform16(divisions_strategy()),
        // Runs: a leading value, a trailing value, a sparse middle.
        (
            divisions_strategy(),
            divisions_strategy(),
            0usize..16,
            0usize..16,
            prop::array::uniform16(divisions_strategy())
        )
            .prop_map(|(lead, tail, a, b, middle)| {
                let (lead_end, tail_start) = (a.min(b), a.max(b));
                let mut t = [0; ROUNDUP_INTERVALS];
                for (i, entry) in t.iter_mut().enumerate() {
                    *entry = if i <= lead_end {
                        lead
                    } else if i >= tail_start {
                        tail
                    } else if middle[i] % 3 == 0 {
                        middle[i]
                    } else {
                        0
                    };
                }
                t
            }),
    ]
    .boxed()
}

fn unit_open() -> BoxedStrategy<f64> {
    prop_oneof![
        (0.0f64..1.0).prop_filter("above 0", |x| *x > 0.0),
        Just(f64::from_bits(1)),
        Just(f64::MIN_POSITIVE),
        Just(1.0 - f64::EPSILON / 2.0),
        Just(0.1),
    ]
    .boxed()
}

/// `(large_segment_mb, max_split_mb, max_non_split_mb)` valid under `compat`.
fn sizes_strategy(compat: Compat) -> BoxedStrategy<(u64, Option<u64>, u64)> {
    (11u64..1000, any::<bool>(), 0u8..3, 0u64..100_000, any::<bool>(), 0u64..100_000)
        .prop_map(move |(large_raw, set_large, split_kind, split_extra, set_non_split, non_split_extra)| {
            let large_mb = if compat.has_large_segment_size && set_large { large_raw } else { 20 };
            let floor = if compat.max_split_size_strictly_above_20 { 21 } else { large_mb };
            let max_split_mb = match split_kind {
                0 => None,
                1 => Some(floor + split_extra),
                _ => Some(u64::MAX >> 20),
            };
            let non_split_mb = if compat.has_max_non_split_rounding && set_non_split {
                floor + non_split_extra
            } else {
                large_mb
            };
            (large_mb, max_split_mb, non_split_mb)
        })
        .boxed()
}

fn valid_config() -> BoxedStrategy<AllocatorConfig> {
    let rest = (
        table_strategy(),
        prop_oneof![Just(0.0), unit_open()],
        prop_oneof![Just(0.0), Just(1.0), Just(-0.0), 0.0f64..=1.0, unit_open()],
        any::<[bool; 6]>(),
        0u32..=7,
        prop_oneof![Just(0u64), any::<u64>()],
    )
        .boxed();
    compat_strategy()
        .prop_flat_map(move |compat| (Just(compat), sizes_strategy(compat), rest.clone()))
        .prop_map(
            |(
                compat,
                (large_mb, max_split_mb, non_split_mb),
                (roundup, gc, fraction, flags, threads_shift, pinned_reserve),
            )| {
                AllocatorConfig {
                    max_split_size_bytes: max_split_mb.map(|mb| mb << 20),
                    max_non_split_rounding_bytes: non_split_mb << 20,
                    large_segment_size_bytes: large_mb << 20,
                    roundup_power2_divisions: roundup,
                    garbage_collection_threshold: gc,
                    expandable_segments: flags[0],
                    per_process_memory_fraction: fraction,
                    release_lock_on_cudamalloc: flags[1],
                    graph_capture_record_stream_reuse: flags[2],
                    backend: if flags[3] { Backend::CudaMallocAsync } else { Backend::Native },
                    pinned_use_cuda_host_register: flags[4],
                    pinned_num_register_threads: 1 << threads_shift,
                    pinned_use_background_threads: flags[5],
                    pinned_reserve_segment_size_mb: pinned_reserve,
                    compat,
                }
            },
        )
        .boxed()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn to_conf_string_parses_back_to_the_same_config(config in valid_config()) {
        prop_assert_eq!(config.validate(), Ok(()));
        let conf = config.to_conf_string();
        let parsed = AllocatorConfig::parse_with_compat(&conf, config.compat);
        prop_assert_eq!(parsed.as_ref(), Ok(&config), "via {:?}", conf);
        // PyTorch's setter from the defaults lands on the same settings (the
        // backend is fixed at load time there).
        let mut replayed =
            AllocatorConfig { compat: config.compat, backend: config.backend, ..AllocatorConfig::pytorch_default() };
        replayed.set_allocator_settings_pytorch(&conf).unwrap();
        prop_assert_eq!(replayed, config);
    }

    #[test]
    fn any_string_parses_to_a_valid_config_or_an_error(
        conf in "([a-z_]{0,30}|max_split_size_mb|roundup_power2_divisions|large_segment_size_mb|expandable_segments|[0-9]{1,3}|>|True|[:,\\[\\] ]){0,12}",
        compat in compat_strategy(),
    ) {
        if let Ok(config) = AllocatorConfig::parse_with_compat(&conf, compat) {
            prop_assert_eq!(config.validate(), Ok(()));
            let again = AllocatorConfig::parse_with_compat(&config.to_conf_string(), compat);
            prop_assert_eq!(again, Ok(config));
        } else if let Err(e) = AllocatorConfig::parse_with_compat(&conf, compat) {
            prop_assert!(!e.to_string().contains('\n'));
        }
    }
}
