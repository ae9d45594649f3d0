from typing import Any

from django import forms
from django.contrib import admin
from django.db import models
from django.http import HttpRequest
from django.utils import timezone

from . import webhooks
from .models import (
    ApprovedEntry,
    AuditEvent,
    Blob,
    Comment,
    EntryCheck,
    EntryDecision,
    EntryRead,
    EntryView,
    GenerationRun,
    GenerationSettings,
    GroupRole,
    ImportJob,
    ImportRun,
    JudgeVerdict,
    Layout,
    LintAllowance,
    LintResult,
    Membership,
    MemoryRead,
    MemoryVersion,
    Notification,
    OperationStat,
    PasswordResetRequest,
    PhaseOneJob,
    PhaseOneResult,
    Pin,
    Proposal,
    ProtectedRawMemory,
    ProviderIdentity,
    RawMemory,
    RejectedEntry,
    ReviewChange,
    ReviewPresence,
    Rollout,
    RolloutSummary,
    SearchDocument,
    SkillFileVersion,
    Watch,
    WorkerHeartbeat,
    Workspace,
    WorkspaceFile,
)
from .workspaces import PathRefused, next_sync, resolve_source


class WorkspaceAdminForm(forms.ModelForm):
    """A source set or changed here must resolve under MEMORYUI_WORKSPACE_ROOTS, like
    every path given on the web; only the import_workspace command imports elsewhere."""

    class Meta:
        model = Workspace
        fields = ["name", "source_kind", "source_path", "last_imported_at", "sync_interval_minutes"]

    def clean(self) -> dict:
        super().clean()
        data = self.cleaned_data
        path, kind = data.get("source_path"), data.get("source_kind")
        if path is None or kind is None:
            return data
        changed = set(self.changed_data)
        syncs = bool(data.get("sync_interval_minutes")) and "sync_interval_minutes" in changed
        if self.instance.pk and not ({"source_path", "source_kind"} & changed or syncs):
            return data  # e.g. a rename of a workspace the command line imported
        try:
            real = resolve_source(path, directory_only=kind == Workspace.SourceKind.DIRECTORY)
        except PathRefused as exc:
            self.add_error("source_path", str(exc))
            return data
        if kind == Workspace.SourceKind.SNAPSHOT and not real.is_file():
            self.add_error("source_path", f"{path} is a directory, not a snapshot archive.")
        data["source_path"] = str(real)
        return data


@admin.register(Workspace)
class WorkspaceAdmin(admin.ModelAdmin):
    form = WorkspaceAdminForm
    list_display = [
        "name",
        "source_kind",
        "source_path",
        "last_imported_at",
        "sync_interval_minutes",
    ]
    search_fields = ["name", "source_path"]
    readonly_fields = ["next_sync_at"]

    def save_model(self, request, obj, form, change):
        if "sync_interval_minutes" in form.changed_data:
            obj.next_sync_at = next_sync(obj, timezone.now())
        super().save_model(request, obj, form, change)


@admin.register(ImportJob)
class ImportJobAdmin(admin.ModelAdmin):
    list_display = ["name", "kind", "status", "created_by", "created_at", "error"]
    list_filter = ["status", "kind"]
    raw_id_fields = ["workspace", "run"]


@admin.register(Layout)
class LayoutAdmin(admin.ModelAdmin):
    list_display = ["workspace", "memories_dir", "sessions_dir", "missing_since"]
    list_filter = ["workspace"]
    list_select_related = ["workspace"]


@admin.register(Blob)
class BlobAdmin(admin.ModelAdmin):
    list_display = ["sha256", "size"]
    search_fields = ["sha256"]
    exclude = ["data"]
    readonly_fields = ["sha256", "size"]


@admin.register(WorkspaceFile)
class WorkspaceFileAdmin(admin.ModelAdmin):
    list_display = ["path", "workspace", "kind", "size", "missing_since", "problem"]
    list_filter = ["kind", "workspace"]
    search_fields = ["path"]
    list_select_related = ["workspace"]
    raw_id_fields = ["blob", "layout"]


@admin.register(Rollout)
class RolloutAdmin(admin.ModelAdmin):
    list_display = ["rollout_id", "layout", "terminal_state", "segment_count", "updated_at"]
    list_filter = ["terminal_state"]
    search_fields = ["rollout_id", "title"]
    list_select_related = ["layout__workspace"]
    raw_id_fields = ["file", "layout"]


@admin.register(RawMemory)
class RawMemoryAdmin(admin.ModelAdmin):
    list_display = ["rollout_id", "layout", "updated_at_raw", "terminal_state"]
    search_fields = ["rollout_id"]
    list_select_related = ["layout__workspace"]
    raw_id_fields = ["file", "layout"]


@admin.register(RolloutSummary)
class RolloutSummaryAdmin(admin.ModelAdmin):
    list_display = ["rollout_id", "slug", "layout", "updated_at_raw", "terminal_state"]
    search_fields = ["rollout_id", "slug"]
    list_select_related = ["layout__workspace"]
    raw_id_fields = ["file", "layout"]


@admin.register(MemoryVersion)
class MemoryVersionAdmin(admin.ModelAdmin):
    list_display = ["layout", "document", "number", "author_kind", "author", "created_at"]
    list_filter = ["document", "author_kind"]
    list_select_related = ["layout__workspace", "author"]
    raw_id_fields = ["blob", "layout"]


@admin.register(SkillFileVersion)
class SkillFileVersionAdmin(admin.ModelAdmin):
    list_display = ["layout", "path", "number", "author_kind", "author", "created_at"]
    list_filter = ["author_kind"]
    list_select_related = ["layout__workspace", "author"]
    raw_id_fields = ["blob", "layout"]
    search_fields = ["path"]


@admin.register(ImportRun)
class ImportRunAdmin(admin.ModelAdmin):
    list_display = [
        "workspace",
        "started_at",
        "status",
        "added",
        "changed",
        "unchanged",
        "missing",
        "scheduled",
    ]
    list_filter = ["status", "scheduled"]
    list_select_related = ["workspace"]


@admin.register(SearchDocument)
class SearchDocumentAdmin(admin.ModelAdmin):
    list_display = ["rollout_id", "kind", "layout"]
    list_filter = ["kind"]
    search_fields = ["rollout_id"]
    list_select_related = ["layout__workspace"]
    raw_id_fields = ["file", "layout"]


@admin.register(GenerationSettings)
class GenerationSettingsAdmin(admin.ModelAdmin):
    list_display = ["layout", "phase_one_model", "phase_two_model", "api", "concurrency"]
    list_select_related = ["layout__workspace"]
    raw_id_fields = ["layout"]


@admin.register(GenerationRun)
class GenerationRunAdmin(admin.ModelAdmin):
    list_display = ["pk", "layout", "status", "created_at", "finished_at", "offline_demo"]
    list_filter = ["status"]
    list_select_related = ["layout__workspace"]
    raw_id_fields = ["layout", "base_memory_md", "base_memory_summary"]


@admin.register(PhaseOneJob)
class PhaseOneJobAdmin(admin.ModelAdmin):
    list_display = ["pk", "run", "rollout", "status", "attempts", "reused"]
    list_filter = ["status"]
    raw_id_fields = ["run", "rollout", "result"]


@admin.register(PhaseOneResult)
class PhaseOneResultAdmin(admin.ModelAdmin):
    list_display = ["rollout_id", "layout", "outcome", "slug", "created_at"]
    list_filter = ["outcome"]
    search_fields = ["rollout_id", "slug"]
    raw_id_fields = ["layout"]


@admin.register(Proposal)
class ProposalAdmin(admin.ModelAdmin):
    list_display = ["pk", "layout", "status", "created_at"]
    list_filter = ["status"]
    raw_id_fields = ["layout", "run", "base_memory_md", "base_memory_summary"]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["workspace", "user", "role"]
    list_filter = ["role", "workspace"]
    raw_id_fields = ["user"]


@admin.register(GroupRole)
class GroupRoleAdmin(admin.ModelAdmin):
    """The identity provider's groups and the workspace roles they give, applied at each
    sign-in (``memoryui.signin``), with ``MEMORYUI_OIDC_GROUP_ROLES`` from the settings."""

    list_display = ["group", "workspace", "role"]
    list_filter = ["role", "workspace"]
    search_fields = ["group"]


@admin.register(ProviderIdentity)
class ProviderIdentityAdmin(admin.ModelAdmin):
    list_display = ["user", "issuer", "subject", "last_sign_in"]
    search_fields = ["user__username", "subject"]
    raw_id_fields = ["user"]
    readonly_fields = ["granted", "last_sign_in"]


@admin.register(Watch)
class WatchAdmin(admin.ModelAdmin):
    """Who gets mail about which workspace (``memoryui.notifications``)."""

    list_display = ["user", "workspace", "mode", "created_at"]
    list_filter = ["mode", "workspace"]
    raw_id_fields = ["user"]


@admin.register(Notification)
class NotificationAdmin(admin.ModelAdmin):
    """Each notification with its tries: unsent ones with an error wait for a retry."""

    list_display = ["created_at", "watch", "event", "digest", "sent_at", "attempts", "error"]
    list_filter = ["event", "digest"]
    raw_id_fields = ["watch"]


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    list_display = ["created_at", "workspace", "actor", "action", "target"]
    list_filter = ["action"]
    search_fields = ["actor", "target"]
    raw_id_fields = ["workspace", "layout", "user"]


@admin.register(EntryDecision)
class EntryDecisionAdmin(admin.ModelAdmin):
    list_display = ["proposal", "document", "key", "decision", "user", "decided_at"]
    list_filter = ["decision"]
    raw_id_fields = ["proposal", "user"]


@admin.register(EntryView)
class EntryViewAdmin(admin.ModelAdmin):
    list_display = ["proposal", "document", "key", "user", "at"]
    raw_id_fields = ["proposal", "user"]


@admin.register(Pin)
class PinAdmin(admin.ModelAdmin):
    list_display = ["layout", "document", "key", "pinned_by", "created_at"]
    raw_id_fields = ["layout", "pinned_by"]


@admin.register(RejectedEntry)
class RejectedEntryAdmin(admin.ModelAdmin):
    list_display = ["layout", "document", "key", "rejected_by", "created_at"]
    raw_id_fields = ["layout", "proposal", "rejected_by"]


@admin.register(Comment)
class CommentAdmin(admin.ModelAdmin):
    list_display = ["proposal", "key", "author", "created_at"]
    raw_id_fields = ["proposal", "author"]


@admin.register(ProtectedRawMemory)
class ProtectedRawMemoryAdmin(admin.ModelAdmin):
    list_display = ["layout", "rollout_id", "protected_by", "created_at"]
    raw_id_fields = ["layout", "protected_by"]


@admin.register(ApprovedEntry)
class ApprovedEntryAdmin(admin.ModelAdmin):
    list_display = ["layout", "document", "key", "approved_by", "approved_at"]
    raw_id_fields = ["layout", "proposal", "approved_by"]


@admin.register(EntryCheck)
class EntryCheckAdmin(admin.ModelAdmin):
    list_display = ["proposal", "document", "key", "risk", "unsupported", "tool_only"]
    list_filter = ["risk"]
    raw_id_fields = ["proposal"]


@admin.register(OperationStat)
class OperationStatAdmin(admin.ModelAdmin):
    list_display = ["operation", "outcome", "count", "seconds"]
    readonly_fields = ["operation", "outcome", "count", "seconds"]


@admin.register(LintResult)
class LintResultAdmin(admin.ModelAdmin):
    list_display = ["key", "created_at"]
    readonly_fields = ["key", "findings", "created_at"]


@admin.register(WorkerHeartbeat)
class WorkerHeartbeatAdmin(admin.ModelAdmin):
    list_display = ["name", "seen_at"]


# Found by imports in the rollouts: read-only, as the rollouts they come from.
@admin.register(MemoryRead)
class MemoryReadAdmin(admin.ModelAdmin):
    list_display = ["rollout", "segment", "item", "kind", "path", "how", "read_at"]
    list_filter = ["kind", "how"]
    list_select_related = ["rollout"]
    raw_id_fields = ["layout", "rollout", "version"]

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False


@admin.register(EntryRead)
class EntryReadAdmin(admin.ModelAdmin):
    list_display = ["key", "rollout", "segment", "read_at", "terminal_state"]
    list_select_related = ["rollout"]
    raw_id_fields = ["read", "layout", "version", "rollout"]

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows the product writes and reads itself: shown, never changed by hand."""

    def has_add_permission(self, request: Any) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False


@admin.register(JudgeVerdict)
class JudgeVerdictAdmin(ReadOnlyAdmin):
    """The model judge's verdicts, one per entry text and rubric version (what a review
    card shows as the model's opinion)."""

    list_display = ["verdict", "model", "rubric_version", "created_at"]
    list_filter = ["verdict", "rubric_version"]
    search_fields = ["reason"]


@admin.register(ReviewChange)
class ReviewChangeAdmin(ReadOnlyAdmin):
    """Each entry change of a pending proposal, what open review pages poll for."""

    list_display = ["proposal", "document", "key", "at"]
    raw_id_fields = ["proposal"]


@admin.register(ReviewPresence)
class ReviewPresenceAdmin(ReadOnlyAdmin):
    """Who has a review page open at which card (ignored once older than a few
    seconds)."""

    list_display = ["proposal", "user", "card", "seen_at"]
    list_select_related = ["user"]
    raw_id_fields = ["proposal", "user"]


@admin.register(PasswordResetRequest)
class PasswordResetRequestAdmin(admin.ModelAdmin):
    """The last hour's reset forms and mails, as the limits count them (deleting one lets
    one more through)."""

    list_display = ["created_at", "user", "address"]
    readonly_fields = ["created_at", "user", "address"]


# --- the API, the remote snapshot store, webhooks ----------------------------------------

from .models import (  # noqa: E402
    ApiToken,
    ImportJobIndex,
    SnapshotStorePolicy,
    UploadedSnapshot,
    UploadedSnapshotIndex,
    Webhook,
    WebhookAttempt,
    WebhookDelivery,
)


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["name", "user", "prefix", "created_at", "expires_at", "revoked_at"]
    readonly_fields = ["prefix", "secret_sha256", "last_used_at"]
    raw_id_fields = ["user"]


@admin.register(UploadedSnapshot)
class UploadedSnapshotAdmin(admin.ModelAdmin):
    list_display = ["workspace", "snapshot_id", "size", "uploaded_at", "uploaded_by"]
    raw_id_fields = ["workspace", "uploaded_by", "import_run"]


class _MemberIndexAdmin(admin.ModelAdmin):
    """A member index (made by an upload's check): shown by its packed size, never
    added or edited (a changed index would only send its readers back to parsing)."""

    @admin.display(description="packed index")
    def packed_size(self, obj: UploadedSnapshotIndex | ImportJobIndex) -> str:
        return f"{len(obj.members):,} bytes"

    def has_add_permission(self, request: Any) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False


@admin.register(UploadedSnapshotIndex)
class UploadedSnapshotIndexAdmin(_MemberIndexAdmin):
    """Read by the downloads."""

    list_display = ["snapshot", "sha256", "packed_size"]
    fields = ["snapshot", "sha256", "packed_size"]
    readonly_fields = ["snapshot", "sha256", "packed_size"]


@admin.register(ImportJobIndex)
class ImportJobIndexAdmin(_MemberIndexAdmin):
    """A queued merge's copy of its upload's index, dropped when the merge is done."""

    list_display = ["job", "packed_size"]
    fields = ["job", "packed_size"]
    readonly_fields = ["job", "packed_size"]


@admin.register(Webhook)
class WebhookAdmin(admin.ModelAdmin):
    """A receiver is shown by its origin: never its secret (shown once, on the webhooks
    page, when it was added), nor its URL's path and query (they often carry a token).
    A receiver added here gets a new secret; one shown here is changed on the webhooks
    page (delete it and add it again)."""

    list_display = ["workspace", "origin", "active", "created_at"]
    raw_id_fields = ["workspace", "created_by"]
    readonly_fields = ["origin", "created_by", "created_at"]
    # A receiver's address typed without a scheme is taken as https (Django's forms would
    # take http until Django 6.0).
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is None:
            return ["workspace", "url", "events", "active"]
        return ["workspace", "origin", "events", "active", "created_by", "created_at"]

    def save_model(self, request: HttpRequest, obj: Webhook, form: Any, change: bool) -> None:
        if not change:
            obj.secret = webhooks.new_secret()
            obj.created_by = request.user if request.user.is_authenticated else None
        super().save_model(request, obj, form, change)

    def delete_model(self, request: HttpRequest, obj: Webhook) -> None:
        webhooks.delete_webhook(obj)  # also while a worker delivers to it


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(admin.ModelAdmin):
    list_display = ["webhook", "event", "status", "created_at"]
    raw_id_fields = ["webhook"]


@admin.register(WebhookAttempt)
class WebhookAttemptAdmin(admin.ModelAdmin):
    list_display = ["delivery", "number", "at", "status_code", "error"]
    raw_id_fields = ["delivery"]


@admin.register(SnapshotStorePolicy)
class SnapshotStorePolicyAdmin(admin.ModelAdmin):
    list_display = ["workspace", "generate_on_upload"]
    raw_id_fields = ["workspace"]


@admin.register(LintAllowance)
class LintAllowanceAdmin(admin.ModelAdmin):
    list_display = ["workspace", "finding_id", "kind", "path", "actor", "created_at"]
    list_filter = ["kind"]
    raw_id_fields = ["workspace", "allowed_by"]
