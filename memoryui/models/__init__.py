"""What memoryui keeps: every imported file's exact bytes, what was parsed from them,
every version of the consolidated memory files, and what people and the pipeline did
with them. The database is the record because a sandbox's disk can change or vanish.

One module per purpose; every model is importable from here (``from memoryui.models
import Layout``), which is how the rest of the code imports them:

- ``workspaces``: workspaces, layouts, imported files and their bytes, import runs/jobs
- ``rollouts``: what the importer parsed (rollouts, raw memories, summaries, search text)
- ``versions``: versions of ``MEMORY.md``, ``memory_summary.md`` and skill files
- ``usage``: which memory files and entries agents read, from the rollouts
- ``generation``: generation settings, runs, phase one's jobs and results
- ``judging``: the model judge's verdicts on entry texts
- ``review``: proposals and what people decide on their entries (pins, approvals ...)
- ``people``: roles, memberships and the audit log
- ``integrations``: API tokens, the remote snapshot store, webhooks
- ``operations``: worker heartbeats, operation counters, lint results and allowances
- ``teams``: identity-provider sign-in (provider identities, group roles), watches and
  the notifications they mail
- ``live``: live review (which entries changed, who is looking at which card)
"""

from .generation import (
    GenerationRun,
    GenerationRunQuerySet,
    GenerationSettings,
    PhaseOneJob,
    PhaseOneResult,
)
from .integrations import (
    ApiToken,
    ImportJobIndex,
    SnapshotStorePolicy,
    UploadedSnapshot,
    UploadedSnapshotIndex,
    Webhook,
    WebhookAttempt,
    WebhookDelivery,
)
from .judging import JudgeVerdict
from .live import ReviewChange, ReviewPresence
from .operations import LintAllowance, LintResult, OperationStat, WorkerHeartbeat
from .people import ROLE_ORDER, AuditEvent, Membership, PasswordResetRequest, Role
from .review import (
    ApprovedEntry,
    Comment,
    EntryCheck,
    EntryDecision,
    EntryRef,
    EntryView,
    Pin,
    Proposal,
    ProtectedRawMemory,
    RejectedEntry,
)
from .rollouts import EPOCH, RawMemory, Rollout, RolloutSummary, SearchDocument
from .teams import GroupRole, Notification, ProviderIdentity, Watch
from .usage import EntryRead, MemoryRead
from .versions import MemoryVersion, SkillFileVersion
from .workspaces import (
    Blob,
    FileQuerySet,
    ImportJob,
    ImportRun,
    Layout,
    LayoutQuerySet,
    Workspace,
    WorkspaceFile,
)

__all__ = [
    "EPOCH",
    "ROLE_ORDER",
    "ApiToken",
    "ApprovedEntry",
    "AuditEvent",
    "Blob",
    "Comment",
    "EntryCheck",
    "EntryDecision",
    "EntryRead",
    "EntryRef",
    "EntryView",
    "FileQuerySet",
    "GenerationRun",
    "GenerationRunQuerySet",
    "GenerationSettings",
    "GroupRole",
    "ImportJob",
    "ImportRun",
    "JudgeVerdict",
    "Layout",
    "LayoutQuerySet",
    "LintAllowance",
    "LintResult",
    "Membership",
    "MemoryRead",
    "MemoryVersion",
    "Notification",
    "OperationStat",
    "PasswordResetRequest",
    "PhaseOneJob",
    "PhaseOneResult",
    "Pin",
    "Proposal",
    "ProtectedRawMemory",
    "ProviderIdentity",
    "RawMemory",
    "RejectedEntry",
    "ReviewChange",
    "ReviewPresence",
    "Role",
    "Rollout",
    "RolloutSummary",
    "SearchDocument",
    "SkillFileVersion",
    "SnapshotStorePolicy",
    "UploadedSnapshot",
    "ImportJobIndex",
    "UploadedSnapshotIndex",
    "Watch",
    "Webhook",
    "WebhookAttempt",
    "WebhookDelivery",
    "WorkerHeartbeat",
    "Workspace",
    "WorkspaceFile",
]
