//! The names the snapshot schema uses (dict keys and string values such as
//! actions and states) as small codes, so the decoder matches each memoized
//! string once and compares integers after that.

use vramkit_core::snapshot::TraceAction;

macro_rules! words {
    ($($variant:ident = $text:literal,)*) => {
        /// A name the schema knows, or [`Word::Other`].
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub(crate) enum Word {
            $($variant,)*
            /// Any other string.
            Other,
        }

        /// Every word, indexed by its code.
        const ALL: &[Word] = &[$(Word::$variant,)* Word::Other];

        impl Word {
            /// The word spelled `text`.
            pub(crate) fn classify(text: &str) -> Word {
                match text {
                    $($text => Word::$variant,)*
                    _ => Word::Other,
                }
            }

            /// Its spelling (`"?"` for `Other`).
            pub(crate) const fn name(self) -> &'static str {
                match self {
                    $(Word::$variant => $text,)*
                    Word::Other => "?",
                }
            }
        }
    };
}

words! {
    Segments = "segments",
    DeviceTraces = "device_traces",
    AllocatorSettings = "allocator_settings",
    ExternalAnnotations = "external_annotations",
    Device = "device",
    Address = "address",
    TotalSize = "total_size",
    AllocatedSize = "allocated_size",
    ActiveSize = "active_size",
    RequestedSize = "requested_size",
    Stream = "stream",
    SegmentType = "segment_type",
    SegmentPoolId = "segment_pool_id",
    IsExpandable = "is_expandable",
    Frames = "frames",
    Blocks = "blocks",
    Size = "size",
    State = "state",
    History = "history",
    Action = "action",
    Addr = "addr",
    DeviceFree = "device_free",
    TimeUs = "time_us",
    CompileContext = "compile_context",
    UserMetadata = "user_metadata",
    Filename = "filename",
    Line = "line",
    Name = "name",
    RealSize = "real_size",
    Small = "small",
    Large = "large",
    ActiveAllocated = "active_allocated",
    ActivePendingFree = "active_pending_free",
    ActiveAwaitingFree = "active_awaiting_free",
    Inactive = "inactive",
    Alloc = "alloc",
    FreeRequested = "free_requested",
    FreeCompleted = "free_completed",
    SegmentAlloc = "segment_alloc",
    SegmentFree = "segment_free",
    SegmentMap = "segment_map",
    SegmentUnmap = "segment_unmap",
    Snapshot = "snapshot",
    Oom = "oom",
    UserDefined = "user_defined",
}

impl Word {
    /// A code for caching (never 0, so 0 can mean "not classified yet").
    pub(crate) fn code(self) -> u32 {
        self as u32 + 1
    }

    /// The word of a code from [`Word::code`].
    pub(crate) fn from_code(code: u32) -> Word {
        ALL.get((code as usize).wrapping_sub(1)).copied().unwrap_or(Word::Other)
    }
}

impl Word {
    /// The trace action this word names, if vramkit models it.
    pub(crate) fn action(self) -> Option<TraceAction> {
        Some(match self {
            Word::Alloc => TraceAction::Alloc,
            Word::FreeRequested => TraceAction::FreeRequested,
            Word::FreeCompleted => TraceAction::FreeCompleted,
            Word::SegmentAlloc => TraceAction::SegmentAlloc,
            Word::SegmentFree => TraceAction::SegmentFree,
            Word::SegmentMap => TraceAction::SegmentMap,
            Word::SegmentUnmap => TraceAction::SegmentUnmap,
            Word::Snapshot => TraceAction::Snapshot,
            Word::Oom => TraceAction::Oom,
            Word::UserDefined => TraceAction::UserDefined,
            _ => return None,
        })
    }
}
