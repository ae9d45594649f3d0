"""The dashboard's routes. The site's URLconf (``memoryui.site_urls``) adds the admin's
and the API's; commands reverse the links they print with this one alone, which loads
neither the admin's modules nor django-ninja, pydantic or the ``openai`` client."""

from django.contrib.auth import views as auth_views
from django.urls import URLPattern, URLResolver, include, path

from . import (
    lockout,
    member_views,
    review_views,
    rollout_views,
    skill_views,
    summary_views,
    token_views,
    views,
    webhook_views,
    workspace_views,
)

app_name = "memoryui"

layout = "w/<str:name>/layouts/<int:layout_pk>/"

memoryui_patterns: list[URLPattern | URLResolver] = [
    path("", views.workspace_list, name="workspace_list"),
    path("w/<str:name>/", views.workspace_detail, name="workspace_detail"),
    path("w/<str:name>/reimport/", views.workspace_reimport, name="workspace_reimport"),
    path("w/<str:name>/imports/<int:pk>/", views.import_detail, name="import_detail"),
    path("w/<str:name>/sync/", workspace_views.workspace_sync, name="workspace_sync"),
    path("workspaces/new/", workspace_views.workspace_new, name="workspace_new"),
    path("workspaces/new/upload/", workspace_views.workspace_upload, name="workspace_upload"),
    path(
        "workspaces/new/directory/",
        workspace_views.workspace_register,
        name="workspace_register",
    ),
    path("imports/<int:pk>/progress/", workspace_views.import_progress, name="import_progress"),
    path(layout, views.layout_detail, name="layout_detail"),
    path(layout + "rollouts/", views.rollout_list, name="rollout_list"),
    path(
        layout + "rollouts/<str:rollout_id>/",
        rollout_views.rollout_detail,
        name="rollout_detail",
    ),
    path(
        layout + "rollouts/<str:rollout_id>/items/<int:segment>/<int:index>/",
        rollout_views.rollout_item,
        name="rollout_item",
    ),
    path(layout + "memory/", views.memory_md, name="memory_md"),
    path(layout + "summary/", views.memory_summary, name="memory_summary"),
    path(layout + "summary/edit/", summary_views.summary_edit, name="summary_edit"),
    path(layout + "summary/edit/preview/", summary_views.summary_preview, name="summary_preview"),
    path(layout + "citations/<str:filename>/", views.citation, name="citation"),
    path(layout + "generation/", views.generation, name="generation"),
    path(layout + "generation/start/", views.generation_start, name="generation_start"),
    path(layout + "runs/<int:run_pk>/", views.run_detail, name="run_detail"),
    path(layout + "runs/<int:run_pk>/cancel/", views.run_cancel, name="run_cancel"),
    path(layout + "proposals/", review_views.proposal_list, name="proposal_list"),
    path(layout + "proposals/<int:pk>/", review_views.proposal_review, name="proposal_review"),
    path(
        layout + "proposals/<int:pk>/decide/", review_views.proposal_decide, name="proposal_decide"
    ),
    path(
        layout + "proposals/<int:pk>/approve/",
        review_views.proposal_approve,
        name="proposal_approve",
    ),
    path(
        layout + "proposals/<int:pk>/reject/", review_views.proposal_reject, name="proposal_reject"
    ),
    path(layout + "proposals/<int:pk>/undo/", review_views.proposal_undo, name="proposal_undo"),
    path(
        layout + "proposals/<int:pk>/viewed/", review_views.proposal_viewed, name="proposal_viewed"
    ),
    path(layout + "proposals/<int:pk>/pin/", review_views.proposal_pin, name="proposal_pin"),
    path(layout + "proposals/<int:pk>/entry/", review_views.proposal_entry, name="proposal_entry"),
    path(
        layout + "proposals/<int:pk>/evidence/",
        review_views.proposal_evidence,
        name="proposal_evidence",
    ),
    path(
        layout + "proposals/<int:pk>/reserve/",
        review_views.proposal_reserve,
        name="proposal_reserve",
    ),
    path(layout + "documents/<str:document>/edit/", review_views.entry_edit, name="entry_edit"),
    path(layout + "documents/<str:document>/pin/", review_views.entry_pin, name="entry_pin"),
    path(layout + "documents/<str:document>/versions/", review_views.versions, name="versions"),
    path(
        layout + "documents/<str:document>/versions/<int:number>/restore/",
        review_views.version_restore,
        name="version_restore",
    ),
    path("w/<str:name>/audit/", review_views.audit_log, name="audit_log"),
    path("w/<str:name>/members/", member_views.members, name="members"),
    path("w/<str:name>/members/<int:user_pk>/", member_views.member, name="member"),
    path("review/", review_views.review_queue, name="review_queue"),
    path(
        layout + "proposals/<int:pk>/comment/",
        review_views.proposal_comment,
        name="proposal_comment",
    ),
    path(
        layout + "proposals/<int:pk>/assign/", review_views.proposal_assign, name="proposal_assign"
    ),
    path(
        layout + "documents/<str:document>/versions/<int:number>/agent/",
        review_views.agent_change,
        name="agent_change",
    ),
    path(layout + "protect/", review_views.protect, name="protect"),
    path(layout + "skills/", skill_views.skill_list, name="skill_list"),
    path(layout + "skills/new/file/", skill_views.skill_file_new, name="skill_file_new"),
    path(
        layout + "skills/proposals/<int:pk>/decide/",
        skill_views.proposal_skill_decide,
        name="proposal_skill_decide",
    ),
    path(layout + "skills/<str:skill>/", skill_views.skill_detail, name="skill_detail"),
    path(
        layout + "skills/<str:skill>/files/<path:file>/edit/",
        skill_views.skill_file_edit,
        name="skill_file_edit",
    ),
    path(
        layout + "skills/<str:skill>/files/<path:file>/delete/",
        skill_views.skill_file_delete,
        name="skill_file_delete",
    ),
    path(
        layout + "skills/<str:skill>/files/<path:file>/history/",
        skill_views.skill_file_history,
        name="skill_file_history",
    ),
    path(
        layout + "skills/<str:skill>/files/<path:file>/history/<int:number>/restore/",
        skill_views.skill_file_restore,
        name="skill_file_restore",
    ),
    path(
        layout + "skills/<str:skill>/files/<path:file>/history/<int:number>/accept/",
        skill_views.skill_file_accept,
        name="skill_file_accept",
    ),
    path("", include("memoryui.export_urls")),
    path("tokens/", token_views.token_list, name="token_list"),
    path("tokens/<int:pk>/revoke/", token_views.token_revoke, name="token_revoke"),
    path("w/<str:name>/webhooks/", webhook_views.webhook_list, name="webhook_list"),
    path(
        "w/<str:name>/webhooks/<int:pk>/delete/",
        webhook_views.webhook_delete,
        name="webhook_delete",
    ),
    path(
        "w/<str:name>/snapshot-store/",
        webhook_views.snapshot_store_policy,
        name="snapshot_store_policy",
    ),
    path(
        "w/<str:name>/webhooks/deliveries/<int:pk>/redeliver/",
        webhook_views.webhook_redeliver,
        name="webhook_redeliver",
    ),
]

urlpatterns = [
    path("", include((memoryui_patterns, "memoryui"))),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    # A way back for someone locked out or who forgot the password: a link by e-mail.
    path(
        "accounts/password-reset/",
        auth_views.PasswordResetView.as_view(),
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
