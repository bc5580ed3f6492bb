//! The `PYTORCH_CUDA_ALLOC_CONF` string syntax (spec sections 1.3 and 11).
//!
//! Architecture: [`tokenize`] cuts the string where PyTorch's
//! `ConfigTokenizer` does (at `, : [ ]`, whitespace dropped, even inside a
//! word); [`pairs`] reads the tokens as `key:value` pairs, a value being one
//! word or a `[k:v,...]` list; [`apply_pairs`] interprets them key by key.
//! Each key's rule is written once, in a `check_*` function, which both the
//! parser and [`validate`] (the typed builder's check) call, so the two can
//! never disagree about what is valid.
//!
//! Where PyTorch is lax by accident vramkit is strict: PyTorch's `stoi`
//! reads `20abc` as 20 and `-1` as a huge number, and R26's tokenizer does not
//! check the `:` and `,` it skips; here each is an error. A trailing comma,
//! at the end or inside a list, is accepted, as in PyTorch.
//!
//! The newest PyTorch keys (`throw_on_cudamalloc_oom`,
//! `expandable_segments_reserve`, `expandable_segments_reserve_by_class`,
//! `pinned_free_catch_all`, `pinned_max_round_threshold_mb`,
//! `pinned_max_cached_size_mb`) are accepted with any value and ignored: none
//! changes a decision the simulated allocator makes today, and a real settings
//! string carrying them must still parse.

use super::{AllocatorConfig, Backend, Compat, ConfigError};
use crate::rounding::{LARGE_BUFFER, MIN_LARGE_ALLOC, ROUNDUP_INTERVALS};

const MIB: u64 = 1 << 20;
/// PyTorch clamps MB values so that `value * 1 MiB` fits a `size_t`.
const MAX_MB: u64 = u64::MAX / MIB;
/// `pinned_num_register_threads` upper bound (`kPinnedMaxRegisterThreads`).
const MAX_REGISTER_THREADS: u64 = 128;

// --- keys -------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Key {
    Backend,
    MaxSplitSize,
    MaxNonSplitRounding,
    LargeSegmentSize,
    RoundupPower2Divisions,
    GarbageCollectionThreshold,
    ExpandableSegments,
    PerProcessMemoryFraction,
    ReleaseLockOnCudaMalloc,
    GraphCaptureRecordStreamReuse,
    PinnedUseCudaHostRegister,
    PinnedNumRegisterThreads,
    PinnedUseBackgroundThreads,
    PinnedReserveSegmentSize,
    /// Newest-PyTorch keys: accepted, value not looked at.
    Ignored,
}

/// Every spelling PyTorch accepts, aliases included, in the order the
/// unknown-key message lists them.
const KEYS: &[(&str, Key)] = &[
    ("backend", Key::Backend),
    ("max_split_size_mb", Key::MaxSplitSize),
    ("max_non_split_rounding_mb", Key::MaxNonSplitRounding),
    ("large_segment_size_mb", Key::LargeSegmentSize),
    ("roundup_power2_divisions", Key::RoundupPower2Divisions),
    ("garbage_collection_threshold", Key::GarbageCollectionThreshold),
    ("expandable_segments", Key::ExpandableSegments),
    ("per_process_memory_fraction", Key::PerProcessMemoryFraction),
    ("release_lock_on_cudamalloc", Key::ReleaseLockOnCudaMalloc),
    ("release_lock_on_hipmalloc", Key::ReleaseLockOnCudaMalloc),
    ("graph_capture_record_stream_reuse", Key::GraphCaptureRecordStreamReuse),
    ("pinned_use_cuda_host_register", Key::PinnedUseCudaHostRegister),
    ("pinned_use_hip_host_register", Key::PinnedUseCudaHostRegister),
    ("pinned_num_register_threads", Key::PinnedNumRegisterThreads),
    ("pinned_use_background_threads", Key::PinnedUseBackgroundThreads),
    ("pinned_reserve_segment_size_mb", Key::PinnedReserveSegmentSize),
    ("throw_on_cudamalloc_oom", Key::Ignored),
    ("expandable_segments_reserve", Key::Ignored),
    ("expandable_segments_reserve_by_class", Key::Ignored),
    ("pinned_free_catch_all", Key::Ignored),
    ("pinned_max_round_threshold_mb", Key::Ignored),
    ("pinned_max_cached_size_mb", Key::Ignored),
];

impl Key {
    /// The name errors use: PyTorch's main spelling, never an alias.
    fn name(self) -> &'static str {
        KEYS.iter().find(|(_, key)| *key == self).map_or("", |(name, _)| name)
    }

    /// The `Compat` switch this key needs, if it is not in every generation.
    fn needs(self, compat: Compat) -> Option<&'static str> {
        match self {
            Key::MaxNonSplitRounding if !compat.has_max_non_split_rounding => {
                Some("Compat::has_max_non_split_rounding (PyTorch 2.6 and later)")
            }
            Key::LargeSegmentSize if !compat.has_large_segment_size => {
                Some("Compat::has_large_segment_size (R26, PyTorch 2.10 and later)")
            }
            _ => None,
        }
    }
}

fn known_keys(compat: Compat) -> Vec<&'static str> {
    KEYS.iter().filter(|(_, key)| key.needs(compat).is_none()).map(|(name, _)| *name).collect()
}

/// R26 moved the generic keys into `AcceleratorAllocatorConfig` and reworded
/// several messages; `large_segment_size_mb` arrived with that rewrite, so its
/// switch tells which wording the configured PyTorch prints.
fn r26_wording(compat: Compat) -> bool {
    compat.has_large_segment_size
}

fn lookup(pair: &Pair, compat: Compat) -> Result<Key, ConfigError> {
    let found = KEYS.iter().find(|(name, _)| *name == pair.key).map(|&(_, key)| key);
    let available_with = match found {
        Some(key) => match key.needs(compat) {
            None => return Ok(key),
            Some(switch) => Some(switch.to_owned()),
        },
        None => None,
    };
    let known = known_keys(compat);
    let suggestion =
        if found.is_none() { super::error::closest(&pair.key, &known).map(str::to_owned) } else { None };
    let pytorch_message = if r26_wording(compat) {
        format!("Unrecognized key '{}' in CUDA allocator config.", pair.key)
    } else {
        format!("Unrecognized CachingAllocator option: {}", pair.key)
    };
    Err(ConfigError::UnknownKey { key: pair.key.clone(), suggestion, known, available_with, pytorch_message })
}

// --- tokens and pairs -----------------------------------------------------------

#[derive(Clone, Debug, PartialEq)]
enum TokenKind {
    Punct(char),
    Word(String),
}

#[derive(Clone, Debug)]
struct Token {
    kind: TokenKind,
    /// Character index of the token's first character in the input.
    position: usize,
}

/// C's `isspace` set, which R26's tokenizer drops (`char::is_ascii_whitespace`
/// leaves out the vertical tab).
fn is_c_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r')
}

fn tokenize(conf: &str) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut word = String::new();
    let mut word_start = 0;
    for (position, c) in conf.chars().enumerate() {
        if matches!(c, ',' | ':' | '[' | ']') {
            if !word.is_empty() {
                tokens.push(Token { kind: TokenKind::Word(std::mem::take(&mut word)), position: word_start });
            }
            tokens.push(Token { kind: TokenKind::Punct(c), position });
        } else if !is_c_space(c) {
            if word.is_empty() {
                word_start = position;
            }
            word.push(c);
        }
    }
    if !word.is_empty() {
        tokens.push(Token { kind: TokenKind::Word(word), position: word_start });
    }
    tokens
}

/// One word, with its index among the tokens (R26 messages quote it).
#[derive(Clone, Debug)]
struct Word {
    text: String,
    token_index: usize,
}

#[derive(Clone, Debug)]
enum Value {
    Scalar(Word),
    /// `[k:v,...]`; `>` is a key like any other here.
    List(Vec<(Word, Word)>),
}

impl Value {
    /// The value as PyTorch saw it, whitespace removed.
    fn text(&self) -> String {
        match self {
            Value::Scalar(word) => word.text.clone(),
            Value::List(items) => {
                let items: Vec<String> =
                    items.iter().map(|(k, v)| format!("{}:{}", k.text, v.text)).collect();
                format!("[{}]", items.join(","))
            }
        }
    }
}

#[derive(Clone, Debug)]
struct Pair {
    key: String,
    /// `None` for `key`, `key:` and `key:,`.
    value: Option<Value>,
}

/// A cursor over the tokens that reports what it expected where.
struct Reader<'a> {
    conf: &'a str,
    tokens: &'a [Token],
    next: usize,
}

impl Reader<'_> {
    fn peek(&self) -> Option<&TokenKind> {
        self.tokens.get(self.next).map(|t| &t.kind)
    }

    fn at_punct(&self, c: char) -> bool {
        self.peek() == Some(&TokenKind::Punct(c))
    }

    fn word(&mut self) -> Option<Word> {
        match self.peek() {
            Some(TokenKind::Word(text)) => {
                let word = Word { text: text.clone(), token_index: self.next };
                self.next += 1;
                Some(word)
            }
            _ => None,
        }
    }

    fn error(&self, expected: &str) -> ConfigError {
        let (position, found) = match self.tokens.get(self.next) {
            Some(token) => {
                let found = match &token.kind {
                    TokenKind::Punct(c) => format!("'{c}'"),
                    TokenKind::Word(w) => format!("'{w}'"),
                };
                (token.position, found)
            }
            None => (self.conf.chars().count(), "end of input".to_owned()),
        };
        let pytorch_message = match expected {
            "':'" => Some("Error parsing CachingAllocator settings, expected :".to_owned()),
            "','" => Some("Error parsing CachingAllocator settings, expected ,".to_owned()),
            _ => None,
        };
        ConfigError::Syntax {
            input: self.conf.to_owned(),
            position,
            expected: expected.to_owned(),
            found,
            pytorch_message,
        }
    }
}

/// `conf := (pair (',' pair)* ','?)?`, `pair := key (':' value?)?`,
/// `value := word | '[' (word ':' word (',' word ':' word)* ','?)? ']'`.
fn pairs(conf: &str) -> Result<Vec<Pair>, ConfigError> {
    let tokens = tokenize(conf);
    let mut reader = Reader { conf, tokens: &tokens, next: 0 };
    let mut pairs = Vec::new();
    while reader.peek().is_some() {
        let key = reader.word().ok_or_else(|| reader.error("a key"))?;
        let at_separator = |reader: &Reader<'_>| reader.peek().is_none() || reader.at_punct(',');
        let value = if reader.at_punct(':') {
            reader.next += 1;
            if reader.at_punct('[') {
                reader.next += 1;
                Some(Value::List(list_items(&mut reader)?))
            } else if let Some(word) = reader.word() {
                Some(Value::Scalar(word))
            } else if at_separator(&reader) {
                None
            } else {
                return Err(reader.error("a value"));
            }
        } else if at_separator(&reader) {
            None
        } else {
            return Err(reader.error("':'"));
        };
        if reader.peek().is_some() {
            if !reader.at_punct(',') {
                return Err(reader.error("','"));
            }
            reader.next += 1;
        }
        pairs.push(Pair { key: key.text, value });
    }
    Ok(pairs)
}

/// The items of a list whose `[` was just read, through its `]`.
fn list_items(reader: &mut Reader<'_>) -> Result<Vec<(Word, Word)>, ConfigError> {
    let mut items = Vec::new();
    loop {
        if reader.at_punct(']') {
            reader.next += 1;
            return Ok(items);
        }
        let key = reader.word().ok_or_else(|| reader.error("a list key or ']'"))?;
        if !reader.at_punct(':') {
            return Err(reader.error("':'"));
        }
        reader.next += 1;
        let value = reader.word().ok_or_else(|| reader.error("a value"))?;
        items.push((key, value));
        if reader.at_punct(',') {
            reader.next += 1;
        } else if !reader.at_punct(']') {
            return Err(reader.error("',' or ']'"));
        }
    }
}

// --- applying pairs ---------------------------------------------------------------

/// How a settings string treats the keys it does not name.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    /// vramkit's update: unnamed keys keep their values.
    Update,
    /// PyTorch's `parseArgs`: some unnamed keys go back to their defaults first.
    PyTorch,
}

pub(super) fn apply(config: &mut AllocatorConfig, conf: &str) -> Result<(), ConfigError> {
    apply_pairs(config, conf, Mode::Update)
}

impl AllocatorConfig {
    /// Applies `conf` as PyTorch's `torch.cuda.memory._set_allocator_settings`
    /// does (spec 11.1), for faithful replays: before the keys are read,
    /// `max_split_size` goes back to unlimited, the roundup table to all 0 and
    /// `garbage_collection_threshold` to 0, and (R26, whose parser does it)
    /// `max_non_split_rounding` to `large_segment_size`. Other keys keep their
    /// values if not named. As in PyTorch the backend cannot change here.
    ///
    /// Unlike PyTorch, an error leaves the settings as they were; PyTorch
    /// keeps whatever it had parsed before the bad key.
    pub fn set_allocator_settings_pytorch(&mut self, conf: &str) -> Result<(), ConfigError> {
        let mut next = self.clone();
        apply_pairs(&mut next, conf, Mode::PyTorch)?;
        *self = next;
        Ok(())
    }
}

fn apply_pairs(config: &mut AllocatorConfig, conf: &str, mode: Mode) -> Result<(), ConfigError> {
    let pairs = pairs(conf)?;
    let compat = config.compat;
    let keys = pairs.iter().map(|pair| lookup(pair, compat)).collect::<Result<Vec<_>, _>>()?;
    let mut named = Vec::with_capacity(pairs.len());
    for (pair, &key) in pairs.iter().zip(&keys) {
        let value = match &pair.value {
            Some(value) => value,
            None => {
                return Err(ConfigError::MissingValue {
                    key: pair.key.clone(),
                    pytorch_message: Some(format!("Error, expecting {} value", pair.key)),
                })
            }
        };
        named.push((key, value));
    }

    if mode == Mode::PyTorch {
        config.max_split_size_bytes = None;
        config.roundup_power2_divisions = [0; ROUNDUP_INTERVALS];
        config.garbage_collection_threshold = 0.0;
    }

    // PyTorch reads large_segment_size_mb first wherever it stands, because
    // the floors of the split sizes depend on it.
    let old_large_segment = config.large_segment_size_bytes;
    for &(key, value) in &named {
        if key == Key::LargeSegmentSize {
            let mb = mb_value(key, value)?;
            check_large_segment_size_mb(mb)?;
            config.large_segment_size_bytes = mb.min(MAX_MB) * MIB;
        }
    }
    match mode {
        // The default of max_non_split_rounding is large_segment_size: a value
        // still at the old default follows it, an explicit one stays.
        Mode::Update => {
            if config.max_non_split_rounding_bytes == old_large_segment {
                config.max_non_split_rounding_bytes = config.large_segment_size_bytes;
            }
        }
        Mode::PyTorch => {
            if compat.has_large_segment_size {
                config.max_non_split_rounding_bytes = config.large_segment_size_bytes;
            }
        }
    }

    for &(key, value) in &named {
        apply_one(config, key, value, mode)?;
    }
    // A key not named can still be out of line with one that was (an explicit
    // max_split_size below a raised large_segment_size).
    validate(config)
}

fn apply_one(config: &mut AllocatorConfig, key: Key, value: &Value, mode: Mode) -> Result<(), ConfigError> {
    let compat = config.compat;
    match key {
        Key::LargeSegmentSize | Key::Ignored => {}
        Key::Backend => {
            let backend = match scalar(key, value)?.text.as_str() {
                "native" => Backend::Native,
                "cudaMallocAsync" => Backend::CudaMallocAsync,
                _ => {
                    return Err(invalid(
                        key,
                        value,
                        "native or cudaMallocAsync",
                        Some("Unknown allocator backend, options are native and cudaMallocAsync".into()),
                    ))
                }
            };
            if mode == Mode::PyTorch && backend != config.backend {
                return Err(invalid(
                    key,
                    value,
                    &format!(
                        "{} (the backend PyTorch chose at load time; it cannot change at run time)",
                        backend_name(config.backend)
                    ),
                    Some(
                        "Allocator backend parsed at runtime != allocator backend parsed at load time".into(),
                    ),
                ));
            }
            config.backend = backend;
        }
        Key::MaxSplitSize => {
            let mb = mb_value(key, value)?;
            check_split_floor(key, mb, config)?;
            config.max_split_size_bytes = Some(mb.min(MAX_MB) * MIB);
        }
        Key::MaxNonSplitRounding => {
            let mb = mb_value(key, value)?;
            check_split_floor(key, mb, config)?;
            config.max_non_split_rounding_bytes = mb.min(MAX_MB) * MIB;
        }
        Key::RoundupPower2Divisions => {
            config.roundup_power2_divisions = roundup_table(value, compat)?;
        }
        Key::GarbageCollectionThreshold => {
            let threshold = float_value(key, value)?;
            check_garbage_collection_threshold(threshold, compat)?;
            config.garbage_collection_threshold = threshold;
        }
        Key::PerProcessMemoryFraction => {
            let fraction = float_value(key, value)?;
            check_memory_fraction(fraction)?;
            config.per_process_memory_fraction = fraction;
        }
        Key::ExpandableSegments => config.expandable_segments = bool_value(key, value, compat)?,
        Key::ReleaseLockOnCudaMalloc => config.release_lock_on_cudamalloc = bool_value(key, value, compat)?,
        Key::GraphCaptureRecordStreamReuse => {
            config.graph_capture_record_stream_reuse = bool_value(key, value, compat)?;
        }
        Key::PinnedUseCudaHostRegister => {
            config.pinned_use_cuda_host_register = bool_value(key, value, compat)?
        }
        Key::PinnedUseBackgroundThreads => {
            config.pinned_use_background_threads = bool_value(key, value, compat)?
        }
        Key::PinnedNumRegisterThreads => {
            let threads = int_value(key, value, "a power of two <= 128")?;
            check_register_threads(threads)?;
            config.pinned_num_register_threads = threads;
        }
        Key::PinnedReserveSegmentSize => {
            let mb = mb_value(key, value)?;
            if mb == 0 {
                return Err(invalid(
                    key,
                    value,
                    "> 0 (MB)",
                    Some("Pinned reserve segment size has to be greater than 0".into()),
                ));
            }
            config.pinned_reserve_segment_size_mb = mb;
        }
    }
    Ok(())
}

/// `roundup_power2_divisions`, single or list form, resolved to its table
/// (spec 1.3). The table starts from all 0 whatever it was before: the key
/// names the whole table.
fn roundup_table(value: &Value, compat: Compat) -> Result<[u64; ROUNDUP_INTERVALS], ConfigError> {
    let key = Key::RoundupPower2Divisions;
    let items = match value {
        Value::Scalar(word) => {
            let divisions = parse_u64(&word.text)
                .ok_or_else(|| invalid(key, value, "a power of two, or a list [K:V,...,>:V]", None))?;
            if !divisions.is_power_of_two() {
                return Err(invalid(
                    key,
                    value,
                    "a power of two (0 disables rounding only in the list form)",
                    Some("For roundups, the divisions has to be power of 2 ".into()),
                ));
            }
            return Ok([divisions; ROUNDUP_INTERVALS]);
        }
        Value::List(items) => items,
    };
    let mut table = [0; ROUNDUP_INTERVALS];
    let mut first = true;
    let mut last_index = 0;
    for (interval, divisions) in items {
        let item = || format!("{}:{}", interval.text, divisions.text);
        let bad_divisions = || ConfigError::InvalidValue {
            key: key.name().into(),
            value: value.text(),
            allowed: format!("a list whose divisions are 0 or powers of two, which {} is not", item()),
            pytorch_message: Some(
                "For roundups, the divisions has to be power of 2 or 0 to disable roundup ".into(),
            ),
        };
        let divisions = parse_u64(&divisions.text).ok_or_else(bad_divisions)?;
        if divisions != 0 && !divisions.is_power_of_two() {
            return Err(bad_divisions());
        }
        if interval.text == ">" {
            // Older parsers started the fill at the last listed index itself.
            let start = if compat.roundup_gt_overwrites_last { last_index } else { last_index + 1 };
            for entry in table.iter_mut().skip(start) {
                *entry = divisions;
            }
            continue;
        }
        let bad_interval = || ConfigError::InvalidValue {
            key: key.name().into(),
            value: value.text(),
            allowed: format!("a list whose keys are powers of two (MB) or '>', which {} is not", item()),
            pytorch_message: Some("For roundups, the intervals have to be power of 2 ".into()),
        };
        let interval_mb = parse_u64(&interval.text).ok_or_else(bad_interval)?;
        if !interval_mb.is_power_of_two() {
            return Err(bad_interval());
        }
        let index = (interval_mb.trailing_zeros() as usize).min(ROUNDUP_INTERVALS - 1);
        if first {
            table[..index].fill(divisions);
            first = false;
        }
        table[index] = divisions;
        last_index = index;
    }
    Ok(table)
}

// --- values -------------------------------------------------------------------------

fn invalid(key: Key, value: &Value, allowed: &str, pytorch_message: Option<String>) -> ConfigError {
    ConfigError::InvalidValue {
        key: key.name().into(),
        value: value.text(),
        allowed: allowed.into(),
        pytorch_message,
    }
}

fn scalar(key: Key, value: &Value) -> Result<&Word, ConfigError> {
    match value {
        Value::Scalar(word) => Ok(word),
        Value::List(_) => Err(invalid(key, value, "a single value, not a list", None)),
    }
}

/// Decimal digits only: PyTorch's `stoi` would also take a sign and ignore
/// trailing junk, which hides mistakes.
fn parse_u64(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

fn int_value(key: Key, value: &Value, allowed: &str) -> Result<u64, ConfigError> {
    parse_u64(&scalar(key, value)?.text).ok_or_else(|| invalid(key, value, allowed, None))
}

fn mb_value(key: Key, value: &Value) -> Result<u64, ConfigError> {
    int_value(key, value, "a whole number of MB")
}

fn float_value(key: Key, value: &Value) -> Result<f64, ConfigError> {
    let text = &scalar(key, value)?.text;
    text.parse().map_err(|_| invalid(key, value, "a number", None))
}

fn bool_value(key: Key, value: &Value, compat: Compat) -> Result<bool, ConfigError> {
    let word = scalar(key, value)?;
    match word.text.as_str() {
        "True" => Ok(true),
        "False" => Ok(false),
        other => {
            let pytorch_message = if r26_wording(compat) {
                format!(
                    "Expected 'True' or 'False' at index {} in ConfigTokenizer but got '{other}'",
                    word.token_index
                )
            } else {
                format!("Expected a single True/False argument for {}", key.name())
            };
            Err(invalid(key, value, "True or False (case-sensitive)", Some(pytorch_message)))
        }
    }
}

fn backend_name(backend: Backend) -> &'static str {
    match backend {
        Backend::Native => "native",
        Backend::CudaMallocAsync => "cudaMallocAsync",
    }
}

// --- the rules, shared by the parser and `validate` ---------------------------------

fn invalid_number(
    key: Key,
    value: impl ToString,
    allowed: String,
    pytorch_message: Option<String>,
) -> ConfigError {
    ConfigError::InvalidValue { key: key.name().into(), value: value.to_string(), allowed, pytorch_message }
}

/// `max_split_size_mb` and `max_non_split_rounding_mb` share a floor: above
/// 20 in older PyTorch, at least `large_segment_size_mb` in R26.
fn check_split_floor(key: Key, mb: u64, config: &AllocatorConfig) -> Result<(), ConfigError> {
    let (ok, relation, floor) = if config.compat.max_split_size_strictly_above_20 {
        let floor = LARGE_BUFFER / MIB;
        (mb > floor, ">", floor)
    } else {
        let floor = config.large_segment_size_bytes / MIB;
        (mb >= floor, ">=", floor)
    };
    if ok {
        return Ok(());
    }
    let floor_note =
        if relation == ">=" && floor != LARGE_BUFFER / MIB { ", large_segment_size_mb" } else { "" };
    Err(invalid_number(
        key,
        mb,
        format!("{relation} {floor} (MB{floor_note})"),
        Some(format!("CachingAllocator option {} too small, must be {relation} {floor}", key.name())),
    ))
}

fn check_large_segment_size_mb(mb: u64) -> Result<(), ConfigError> {
    let floor = MIN_LARGE_ALLOC / MIB;
    if mb > floor {
        return Ok(());
    }
    Err(invalid_number(
        Key::LargeSegmentSize,
        mb,
        format!("> {floor} (MB)"),
        Some(format!("CachingAllocator option large_segment_size_mb must be > {floor} MB")),
    ))
}

fn check_garbage_collection_threshold(threshold: f64, compat: Compat) -> Result<(), ConfigError> {
    if threshold > 0.0 && threshold < 1.0 {
        return Ok(());
    }
    let pytorch_message = if r26_wording(compat) {
        "garbage_collect_threshold is invalid, set it in (0.0, 1.0)"
    } else if threshold >= 1.0 {
        "garbage_collect_threshold too big, set it 0.0~1.0"
    } else {
        "garbage_collect_threshold too small, set it 0.0~1.0"
    };
    Err(invalid_number(
        Key::GarbageCollectionThreshold,
        threshold,
        "in (0.0, 1.0), exclusive".into(),
        Some(pytorch_message.into()),
    ))
}

fn check_memory_fraction(fraction: f64) -> Result<(), ConfigError> {
    if (0.0..=1.0).contains(&fraction) {
        return Ok(());
    }
    Err(invalid_number(
        Key::PerProcessMemoryFraction,
        fraction,
        "in [0.0, 1.0]".into(),
        Some("per_process_memory_fraction is invalid, set it in [0.0, 1.0]".into()),
    ))
}

fn check_register_threads(threads: u64) -> Result<(), ConfigError> {
    let allowed = || format!("a power of two <= {MAX_REGISTER_THREADS}");
    if !threads.is_power_of_two() {
        return Err(invalid_number(
            Key::PinnedNumRegisterThreads,
            threads,
            allowed(),
            Some("Number of register threads has to be power of 2".into()),
        ));
    }
    if threads > MAX_REGISTER_THREADS {
        return Err(invalid_number(
            Key::PinnedNumRegisterThreads,
            threads,
            allowed(),
            Some(format!(
                "Number of register threads should be less than or equal to {MAX_REGISTER_THREADS}"
            )),
        ));
    }
    Ok(())
}

/// A byte field the string form gives in MB.
fn whole_mib(key: Key, bytes: u64) -> Result<u64, ConfigError> {
    if bytes % MIB == 0 {
        return Ok(bytes / MIB);
    }
    Err(invalid_number(key, format!("{bytes} bytes"), "a whole number of MiB".into(), None))
}

/// The checks the parser makes, on a config built field by field. A value
/// the string form cannot name but which is its default is fine: the
/// default `max_non_split_rounding` (20) is below the older `> 20` floor, and
/// an unset `garbage_collection_threshold` is 0.
pub(super) fn validate(config: &AllocatorConfig) -> Result<(), ConfigError> {
    let compat = config.compat;

    let large_segment_mb = whole_mib(Key::LargeSegmentSize, config.large_segment_size_bytes)?;
    if !compat.has_large_segment_size && config.large_segment_size_bytes != LARGE_BUFFER {
        return Err(invalid_number(
            Key::LargeSegmentSize,
            large_segment_mb,
            "20 (MB): this PyTorch generation has no large_segment_size_mb (Compat::has_large_segment_size is off)".into(),
            None,
        ));
    }
    check_large_segment_size_mb(large_segment_mb)?;

    if let Some(bytes) = config.max_split_size_bytes {
        check_split_floor(Key::MaxSplitSize, whole_mib(Key::MaxSplitSize, bytes)?, config)?;
    }

    let non_split = config.max_non_split_rounding_bytes;
    if non_split != config.large_segment_size_bytes {
        let mb = whole_mib(Key::MaxNonSplitRounding, non_split)?;
        if !compat.has_max_non_split_rounding {
            return Err(invalid_number(
                Key::MaxNonSplitRounding,
                mb,
                format!(
                    "{large_segment_mb} (MB, large_segment_size): this PyTorch generation has no \
                     max_non_split_rounding_mb (Compat::has_max_non_split_rounding is off)"
                ),
                None,
            ));
        }
        check_split_floor(Key::MaxNonSplitRounding, mb, config)?;
    }

    for (index, &divisions) in config.roundup_power2_divisions.iter().enumerate() {
        if divisions != 0 && !divisions.is_power_of_two() {
            return Err(invalid_number(
                Key::RoundupPower2Divisions,
                format!("{divisions} (size class {index})"),
                "0 or a power of two in every size class".into(),
                Some("For roundups, the divisions has to be power of 2 or 0 to disable roundup ".into()),
            ));
        }
    }

    if config.garbage_collection_threshold != 0.0 {
        check_garbage_collection_threshold(config.garbage_collection_threshold, compat)?;
    }
    check_memory_fraction(config.per_process_memory_fraction)?;
    check_register_threads(config.pinned_num_register_threads)?;
    Ok(())
}

// --- writing ------------------------------------------------------------------------

/// The canonical string: keys in a fixed order, those at PyTorch's defaults
/// left out, so that parsing it (under the same `Compat`) gives the config back.
pub(super) fn to_conf_string(config: &AllocatorConfig) -> String {
    let defaults = AllocatorConfig { compat: config.compat, ..AllocatorConfig::pytorch_default() };
    let mut parts: Vec<String> = Vec::new();
    if config.backend != defaults.backend {
        parts.push(format!("backend:{}", backend_name(config.backend)));
    }
    if config.large_segment_size_bytes != defaults.large_segment_size_bytes {
        parts.push(format!("large_segment_size_mb:{}", config.large_segment_size_bytes / MIB));
    }
    if let Some(bytes) = config.max_split_size_bytes {
        parts.push(format!("max_split_size_mb:{}", bytes / MIB));
    }
    // Its default follows large_segment_size, which is how the parser treats it.
    if config.max_non_split_rounding_bytes != config.large_segment_size_bytes {
        parts.push(format!("max_non_split_rounding_mb:{}", config.max_non_split_rounding_bytes / MIB));
    }
    if let Some(divisions) = roundup_string(&config.roundup_power2_divisions, config.compat) {
        parts.push(format!("roundup_power2_divisions:{divisions}"));
    }
    if config.garbage_collection_threshold != defaults.garbage_collection_threshold {
        // `{}` of an f64 is the shortest text that parses back to the same bits.
        parts.push(format!("garbage_collection_threshold:{}", config.garbage_collection_threshold));
    }
    let flags = [
        ("expandable_segments", config.expandable_segments, defaults.expandable_segments),
        (
            "release_lock_on_cudamalloc",
            config.release_lock_on_cudamalloc,
            defaults.release_lock_on_cudamalloc,
        ),
        (
            "graph_capture_record_stream_reuse",
            config.graph_capture_record_stream_reuse,
            defaults.graph_capture_record_stream_reuse,
        ),
        (
            "pinned_use_cuda_host_register",
            config.pinned_use_cuda_host_register,
            defaults.pinned_use_cuda_host_register,
        ),
        (
            "pinned_use_background_threads",
            config.pinned_use_background_threads,
            defaults.pinned_use_background_threads,
        ),
    ];
    if config.per_process_memory_fraction != defaults.per_process_memory_fraction {
        parts.push(format!("per_process_memory_fraction:{}", config.per_process_memory_fraction));
    }
    for (name, value, default) in flags {
        if value != default {
            parts.push(format!("{name}:{}", if value { "True" } else { "False" }));
        }
    }
    if config.pinned_num_register_threads != defaults.pinned_num_register_threads {
        parts.push(format!("pinned_num_register_threads:{}", config.pinned_num_register_threads));
    }
    if config.pinned_reserve_segment_size_mb != defaults.pinned_reserve_segment_size_mb {
        parts.push(format!("pinned_reserve_segment_size_mb:{}", config.pinned_reserve_segment_size_mb));
    }
    parts.join(",")
}

/// The shortest-ish `roundup_power2_divisions` value giving `table` under
/// `compat`, or `None` for the default (all 0). One number when every class
/// is the same; otherwise a list: the first key covers the leading run (it
/// fills every index below it), `>` the trailing run, non-zero entries in
/// between are listed one by one (unlisted ones are 0).
fn roundup_string(table: &[u64; ROUNDUP_INTERVALS], compat: Compat) -> Option<String> {
    let first = table[0];
    if table.iter().all(|&d| d == first) {
        return (first != 0).then(|| first.to_string());
    }
    let last = table[ROUNDUP_INTERVALS - 1];
    // Both runs are proper: not every entry is equal.
    let lead_end = table.iter().position(|&d| d != first).unwrap_or(ROUNDUP_INTERVALS) - 1;
    let tail_start =
        ROUNDUP_INTERVALS - table.iter().rev().position(|&d| d != last).unwrap_or(ROUNDUP_INTERVALS);

    let mut listed: Vec<usize> = vec![lead_end];
    let mut middle_end = ROUNDUP_INTERVALS;
    let mut gt = None;
    if last != 0 {
        middle_end = tail_start;
        gt = Some(last);
        // `>` fills from just after the last listed index (R26) or from that
        // index itself (older), so that index must be the tail's edge.
        let edge = if compat.roundup_gt_overwrites_last { tail_start } else { tail_start - 1 };
        if edge > lead_end {
            listed.push(edge);
        }
    }
    listed.extend((lead_end + 1..middle_end).filter(|&i| table[i] != 0));
    listed.sort_unstable();
    listed.dedup();

    let mut items: Vec<String> = listed.iter().map(|&i| format!("{}:{}", 1u64 << i, table[i])).collect();
    if let Some(divisions) = gt {
        items.push(format!(">:{divisions}"));
    }
    Some(format!("[{}]", items.join(",")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(conf: &str) -> Vec<String> {
        tokenize(conf)
            .into_iter()
            .map(|t| match t.kind {
                TokenKind::Punct(c) => c.to_string(),
                TokenKind::Word(w) => w,
            })
            .collect()
    }

    #[test]
    fn tokenizer_splits_like_pytorch() {
        assert_eq!(
            words("key1:val1,key2:[val2,val3]"),
            ["key1", ":", "val1", ",", "key2", ":", "[", "val2", ",", "val3", "]"]
        );
        assert_eq!(words(" a b :\t1\n"), ["ab", ":", "1"]);
        assert_eq!(words("\x0bx"), ["x"]);
        assert!(words("").is_empty());
    }

    #[test]
    fn token_positions_count_characters() {
        let tokens = tokenize("é:  x");
        assert_eq!(tokens[0].position, 0);
        assert_eq!(tokens[1].position, 1);
        assert_eq!(tokens[2].position, 4);
    }

    #[test]
    fn roundup_string_lists_the_edge_before_gt() {
        let mut table = [0; ROUNDUP_INTERVALS];
        table[..4].fill(8);
        table[10..].fill(2);
        assert_eq!(roundup_string(&table, Compat::R26).unwrap(), "[8:8,512:0,>:2]");
        assert_eq!(roundup_string(&table, Compat::R24).unwrap(), "[8:8,1024:2,>:2]");
    }
}
