"""The dashboard's routes, every one of them, in one list (there is no other URL module
of pages). The site's URLconf (``memoryui.site_urls``) adds the admin's and the API's;
commands reverse the links they print with this one alone, which loads neither the
admin's modules nor django-ninja, pydantic or the ``openai`` client."""

from django.contrib.auth import views as auth_views
from django.urls import URLPattern, URLResolver, include, path

from . import lockout
from .views import (
    audit,
    decisions,
    entries,
    exports,
    layouts,
    live,
    members,
    notifications,
    proposals,
    result,
    rollouts,
    runs,
    signin,
    skills,
    snapshot_store,
    summary,
    tokens,
    usage,
    versions,
    webhooks,
    workspaces,
)

app_name = "memoryui"

# Every page's route, in one list, by room (the module in ``memoryui.views`` that serves
# it). A route under ``w/<name>/`` must be a ``roles.workspace_view``: a system check
# (``memoryui.E001``) refuses to start otherwise.
workspace = "w/<str:name>/"
layout = workspace + "layouts/<int:layout_pk>/"
proposal = layout + "proposals/<int:pk>/"
document = layout + "documents/<str:document>/"
skill_file = layout + "skills/<str:skill>/files/<path:file>/"

memoryui_patterns: list[URLPattern | URLResolver] = [
    # workspaces
    path("", workspaces.workspace_list, name="workspace_list"),
    path(workspace, workspaces.workspace_detail, name="workspace_detail"),
    path(workspace + "reimport/", workspaces.workspace_reimport, name="workspace_reimport"),
    path(workspace + "imports/<int:pk>/", workspaces.import_detail, name="import_detail"),
    path(workspace + "sync/", workspaces.workspace_sync, name="workspace_sync"),
    path(
        workspace + "known-hosts/",
        workspaces.workspace_known_hosts,
        name="workspace_known_hosts",
    ),
    path("workspaces/new/", workspaces.workspace_new, name="workspace_new"),
    path("workspaces/new/upload/", workspaces.workspace_upload, name="workspace_upload"),
    path("workspaces/new/directory/", workspaces.workspace_register, name="workspace_register"),
    path("imports/<int:pk>/progress/", workspaces.import_progress, name="import_progress"),
    # a layout's pages
    path(layout, layouts.layout_detail, name="layout_detail"),
    path(layout + "memory/", layouts.memory_md, name="memory_md"),
    path(layout + "summary/", layouts.memory_summary, name="memory_summary"),
    path(layout + "usage/", usage.layout_usage, name="layout_usage"),
    path(layout + "usage/forget/", usage.propose_forgetting, name="propose_forgetting"),
    path(layout + "citations/<str:filename>/", layouts.citation, name="citation"),
    # rollouts
    path(layout + "rollouts/", rollouts.rollout_list, name="rollout_list"),
    path(layout + "rollouts/<str:rollout_id>/", rollouts.rollout_detail, name="rollout_detail"),
    path(
        layout + "rollouts/<str:rollout_id>/items/<int:segment>/<int:index>/",
        rollouts.rollout_item,
        name="rollout_item",
    ),
    # generation runs
    path(layout + "generation/", runs.generation, name="generation"),
    path(layout + "generation/start/", runs.generation_start, name="generation_start"),
    path(layout + "runs/<int:run_pk>/", runs.run_detail, name="run_detail"),
    path(layout + "runs/<int:run_pk>/cancel/", runs.run_cancel, name="run_cancel"),
    # proposals and the review page
    path("review/", proposals.review_queue, name="review_queue"),
    path(layout + "proposals/", proposals.proposal_list, name="proposal_list"),
    path(proposal, proposals.proposal_review, name="proposal_review"),
    path(proposal + "entry/", proposals.proposal_entry, name="proposal_entry"),
    path(proposal + "edit/", proposals.proposal_edit, name="proposal_edit"),
    path(proposal + "evidence/", proposals.proposal_evidence, name="proposal_evidence"),
    path(proposal + "comment/", proposals.proposal_comment, name="proposal_comment"),
    path(proposal + "comment/form/", proposals.proposal_comment_form, name="proposal_comment_form"),
    path(proposal + "assign/", proposals.proposal_assign, name="proposal_assign"),
    path(proposal + "live/", live.proposal_live, name="proposal_live"),
    path(proposal + "live/card/", live.proposal_live_card, name="proposal_live_card"),
    path(proposal + "live/leave/", live.proposal_live_leave, name="proposal_live_leave"),
    path(layout + "protect/", proposals.protect, name="protect"),
    # what reviewers decide
    path(proposal + "decide/", decisions.proposal_decide, name="proposal_decide"),
    path(proposal + "undo/", decisions.proposal_undo, name="proposal_undo"),
    path(proposal + "duplicate/", decisions.proposal_duplicate, name="proposal_duplicate"),
    path(proposal + "result/", result.proposal_result, name="proposal_result"),
    path(proposal + "viewed/", decisions.proposal_viewed, name="proposal_viewed"),
    path(proposal + "pin/", decisions.proposal_pin, name="proposal_pin"),
    path(proposal + "approve/", decisions.proposal_approve, name="proposal_approve"),
    path(proposal + "reject/", decisions.proposal_reject, name="proposal_reject"),
    path(
        proposal + "request-changes/",
        decisions.proposal_request_changes,
        name="proposal_request_changes",
    ),
    path(proposal + "reserve/", decisions.proposal_reserve, name="proposal_reserve"),
    path(
        proposal + "forgotten/decide/",
        decisions.proposal_forget_decide,
        name="proposal_forget_decide",
    ),
    # entries edited by hand, the summary editor
    path(document + "edit/", entries.entry_edit, name="entry_edit"),
    path(document + "pin/", entries.entry_pin, name="entry_pin"),
    path(layout + "summary/edit/", summary.summary_edit, name="summary_edit"),
    path(layout + "summary/edit/preview/", summary.summary_preview, name="summary_preview"),
    # versions
    path(document + "versions/", versions.versions, name="versions"),
    path(
        document + "versions/<int:number>/restore/",
        versions.version_restore,
        name="version_restore",
    ),
    path(document + "versions/<int:number>/agent/", versions.agent_change, name="agent_change"),
    # skills (the literal segments before the skill names they could be taken for)
    path(layout + "skills/", skills.skill_list, name="skill_list"),
    path(layout + "skills/new/file/", skills.skill_file_new, name="skill_file_new"),
    path(
        layout + "skills/proposals/<int:pk>/decide/",
        skills.proposal_skill_decide,
        name="proposal_skill_decide",
    ),
    path(layout + "skills/<str:skill>/", skills.skill_detail, name="skill_detail"),
    path(skill_file + "edit/", skills.skill_file_edit, name="skill_file_edit"),
    path(skill_file + "delete/", skills.skill_file_delete, name="skill_file_delete"),
    path(skill_file + "history/", skills.skill_file_history, name="skill_file_history"),
    path(
        skill_file + "history/<int:number>/restore/",
        skills.skill_file_restore,
        name="skill_file_restore",
    ),
    path(
        skill_file + "history/<int:number>/accept/",
        skills.skill_file_accept,
        name="skill_file_accept",
    ),
    # memory leaving memoryui: write-back and export
    path(layout + "writeback/", exports.layout_writeback, name="layout_writeback"),
    path(workspace + "export/", exports.workspace_export, name="workspace_export"),
    # people and access
    path(workspace + "members/", members.members, name="members"),
    path(workspace + "notifications/", notifications.watch, name="watch"),
    path(workspace + "members/<int:user_pk>/", members.member, name="member"),
    path("tokens/", tokens.token_list, name="token_list"),
    path("tokens/<int:pk>/revoke/", tokens.token_revoke, name="token_revoke"),
    path(workspace + "audit/", audit.audit_log, name="audit_log"),
    # integrations: webhooks, the snapshot store's policy
    path(workspace + "webhooks/", webhooks.webhook_list, name="webhook_list"),
    path(workspace + "webhooks/<int:pk>/delete/", webhooks.webhook_delete, name="webhook_delete"),
    path(
        workspace + "webhooks/deliveries/<int:pk>/redeliver/",
        webhooks.webhook_redeliver,
        name="webhook_redeliver",
    ),
    path(
        workspace + "snapshot-store/",
        snapshot_store.snapshot_store_policy,
        name="snapshot_store_policy",
    ),
]

urlpatterns = [
    path("", include((memoryui_patterns, "memoryui"))),
    path("accounts/login/", signin.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    # The one-click unsubscribe of notification mail (a signed token; no login).
    path(
        "notifications/unsubscribe/<str:token>/",
        notifications.unsubscribe,
        name="notifications_unsubscribe",
    ),
    # Sign-in with the identity provider (404 unless MEMORYUI_OIDC_ISSUER is set).
    path("accounts/oidc/start/", signin.start, name="oidc_start"),
    path("accounts/oidc/callback/", signin.callback, name="oidc_callback"),
    # A way back for someone locked out or who forgot the password: a link by e-mail.
    path(
        "accounts/password-reset/",
        lockout.PasswordResetView.as_view(),
        name="password_reset",
    ),
    path(
        "accounts/password-reset/sent/",
        auth_views.PasswordResetDoneView.as_view(),
        name="password_reset_done",
    ),
    path(
        "accounts/password-reset/<uidb64>/<token>/",
        lockout.PasswordResetConfirmView.as_view(),
        name="password_reset_confirm",
    ),
    path(
        "accounts/password-reset/done/",
        auth_views.PasswordResetCompleteView.as_view(),
        name="password_reset_complete",
    ),
]
