"""People deciding what agents remember: edits, pins, proposal decisions, approval,
restores. Every change is a new version and an audit event.

Saves are serialised per layout (a row lock on the layout) and carry the version they
were based on: a save based on anything but the latest version is refused, so two people
editing the same entry never overwrite each other.

Proposal decisions (entry decisions, approve, reject, reserve) read the proposal again
under a row lock and check it there (``memoryui.proposal_lock``, which skill file
decisions share): of two decisions at once exactly one finds the proposal pending, the
other is refused with what happened instead (``DecisionRefused``).

One module per purpose, each importing only those below it; every public name is
importable from here (``curation.approve``), which is how the rest of the code uses them:

- ``approval``: a whole proposal approved or rejected
- ``entry_decisions``: one entry decided, undone, viewed; a duplicate pair acknowledged
- ``queue``: reservations, assignment, comments
- ``reviews``: a proposal as its reviewers see it (changes, conflicts, quarantine,
  duplicates)
- ``edits``: people's saves, entry edits, restores, an agent's own edit accepted or
  reverted
- ``pins``: pinned entries, protected raw memories, rejected entries
- ``versions``: a document's latest and latest approved version, and its text
"""

from ..proposal_lock import AlreadyDecided, DecisionRefused, HeldByOther, held_by, held_by_other
from .approval import (
    NeedsAnotherApproval,
    UnresolvedConflicts,
    approve,
    change_request,
    reject_proposal,
    request_changes,
    required_approvals,
    review_feedback,
)
from .edits import (
    StaleVersion,
    accept_agent_change,
    add_entry,
    edit_entry,
    restore,
    revert_agent_change,
    save_document,
    with_entry_added,
    with_entry_replaced,
)
from .entry_decisions import (
    EntryDecided,
    acknowledge_duplicate,
    carry_views,
    decide,
    decided_by_others,
    set_viewed,
    undo_decision,
)
from .pins import (
    PinImpact,
    pinned_texts,
    pins_affected_by,
    rejected_texts,
    set_pin,
    set_protected,
)
from .queue import RESERVATION, add_comment, assign, release, reserve
from .reviews import (
    DUPLICATE_ACKS,
    UNDECIDED_ACCEPT,
    UNDECIDED_REJECT,
    DocumentReview,
    Duplicate,
    approved_texts,
    decidable,
    document_reviews,
    duplicates,
    open_duplicates,
    pair_id,
    quarantined,
    reintroduced,
    rejections,
)
from .versions import latest, latest_approved, text_of

__all__ = [
    "DUPLICATE_ACKS",
    "RESERVATION",
    "UNDECIDED_ACCEPT",
    "UNDECIDED_REJECT",
    "AlreadyDecided",
    "DecisionRefused",
    "DocumentReview",
    "Duplicate",
    "EntryDecided",
    "HeldByOther",
    "NeedsAnotherApproval",
    "PinImpact",
    "StaleVersion",
    "UnresolvedConflicts",
    "accept_agent_change",
    "acknowledge_duplicate",
    "add_comment",
    "add_entry",
    "approve",
    "approved_texts",
    "assign",
    "carry_views",
    "change_request",
    "decidable",
    "decide",
    "decided_by_others",
    "document_reviews",
    "duplicates",
    "edit_entry",
    "held_by",
    "held_by_other",
    "latest",
    "latest_approved",
    "open_duplicates",
    "pair_id",
    "pinned_texts",
    "pins_affected_by",
    "quarantined",
    "reintroduced",
    "reject_proposal",
    "rejections",
    "rejected_texts",
    "release",
    "required_approvals",
    "request_changes",
    "reserve",
    "restore",
    "review_feedback",
    "revert_agent_change",
    "save_document",
    "set_pin",
    "set_protected",
    "set_viewed",
    "text_of",
    "undo_decision",
    "with_entry_added",
    "with_entry_replaced",
]
