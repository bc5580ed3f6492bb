//! [`Plan`]: how a driver that follows a reading applies each entry of a
//! trace, worked out once per trace with the reading (`drive` applies it).

use crate::pools::PoolRouting;
use crate::reading::Reading;
use vramkit_core::TraceAction;
use vramkit_trace::Entries;

/// How a driver that follows a reading applies an entry. The plain cases
/// (most entries of most traces) are told apart once per trace, with the
/// reading, rather than at every entry of every replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Plan {
    /// An `alloc` that no private pool serves: a `malloc`.
    Malloc,
    /// Such an `alloc` whose block the next two entries free ([`Plan::Free`]
    /// and [`Plan::Completed`]): a temporary, the model's
    /// `malloc_then_free` where it takes it.
    Temporary,
    /// A `free_requested` directly followed by its `free_completed`, its
    /// block not held: a plain `free`.
    Free,
    /// That `free_completed`: no synchronisation emitted it.
    Completed,
    /// Anything else: `Driver::apply` looks at it.
    Apply,
}

impl Plan {
    /// Whether applying the entry may raise reserved bytes (a free or a
    /// completion only gives memory back to the cache).
    #[inline(always)]
    pub fn may_reserve(self) -> bool {
        matches!(self, Plan::Malloc | Plan::Temporary | Plan::Apply)
    }
}

/// The plan of every entry of `events`, under `reading` and `routing`:
/// each plain case exactly where `Driver::apply`, following them, would
/// take that case's path.
pub(crate) fn plan(events: &Entries, reading: &Reading, routing: &PoolRouting) -> Vec<Plan> {
    let actions = events.actions();
    let mut plan = vec![Plan::Apply; actions.len()];
    for i in 0..actions.len() {
        match actions[i] {
            TraceAction::Alloc if routing.pool(i).is_none() => plan[i] = Plan::Malloc,
            TraceAction::FreeRequested
                if actions.get(i + 1) == Some(&TraceAction::FreeCompleted)
                    && events.addr(i + 1) == events.addr(i)
                    && reading.held_pairs.binary_search(&i).is_err() =>
            {
                plan[i] = Plan::Free;
                plan[i + 1] = Plan::Completed;
            }
            _ => {}
        }
    }
    // An address is live once: the free of the address just allocated is
    // that allocation's.
    for i in 0..plan.len().saturating_sub(2) {
        if plan[i] == Plan::Malloc && plan[i + 1] == Plan::Free && events.addr(i + 1) == events.addr(i) {
            plan[i] = Plan::Temporary;
        }
    }
    plan
}
