"""The skill pages: the curated skill files of a layout (``memoryui.skills``), each with
its versions. Viewers read; editors edit, add, delete and restore files; reviewers
accept or reject a proposal's skill changes file by file."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib import messages
from django.db.models import F
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.safestring import SafeString
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from generation import tree

from .. import consolidation, curation, diffs, forms, skills
from ..documents import SHOWN_BYTES
from ..models import Blob, Layout, Proposal, Role, SkillFileVersion
from ..rendering import render_markdown
from ..roles import has_role, workspace_view
from .common import HtmxHttpRequest, bad_request
from .review_common import progress_bar


def _rel(skill: str, file: str) -> str:
    """``skills/<skill>/<file>`` from the route, or 404 for a name that could leave the
    skill's folder."""
    parts = [skill, *file.split("/")]
    if any(p in ("", ".", "..") for p in parts) or "/" in skill:
        raise Http404("No such skill file.")
    return f"skills/{skill}/{file}"


def _file_url(view: str, layout: Layout, rel: str, *args: Any) -> str:
    _, skill, file = rel.split("/", 2)
    return reverse(f"memoryui:{view}", args=[layout.workspace.name, layout.pk, skill, file, *args])


def _detail_url(layout: Layout, skill: str, anchor: str = "") -> str:
    url = reverse("memoryui:skill_detail", args=[layout.workspace.name, layout.pk, skill])
    return url + (f"#{anchor}" if anchor else "")


def file_anchor(rel: str) -> str:
    return "file-" + "".join(c if c.isalnum() or c in "-_" else "-" for c in rel.split("/", 2)[-1])


def _base(request: HtmxHttpRequest, layout: Layout, **more: Any) -> dict[str, Any]:
    return {
        "layout": layout,
        "workspace": layout.workspace,
        "can_edit": has_role(request.user, layout.workspace, Role.EDITOR),
        **more,
    }


# --- list and detail --------------------------------------------------------------------


@dataclass
class ListedFile:
    path: str  # relative to the memories dir
    name: str  # relative to the skill's folder
    number: int
    size: int
    deleted: bool
    pending: bool  # differs from the disk as last imported: the next write-back writes it


@workspace_view(Role.VIEWER)
@require_GET
def skill_list(request: HtmxHttpRequest, name: str, layout_pk: int) -> HttpResponse:
    layout = request.layout
    disk = skills.disk_state(layout)
    grouped: dict[str, list[ListedFile]] = {}
    entry_points: dict[str, str] = {}
    for row in skills.current_versions(layout).values("path", "number", "blob_id", "blob__size"):
        path, blob_id = row["path"], row["blob_id"]
        skill = skills.skill_of(path)
        pending = blob_id != disk.get(path) and not (blob_id is None and path not in disk)
        grouped.setdefault(skill, []).append(
            ListedFile(
                path,
                path.split("/", 2)[2],
                row["number"],
                row["blob__size"] or 0,
                blob_id is None,
                pending,
            )
        )
        if path == f"skills/{skill}/SKILL.md" and blob_id:
            entry_points[blob_id] = skill
    descriptions: dict[str, str] = {}
    for sha256, data in Blob.objects.filter(pk__in=list(entry_points)).values_list(
        "sha256", "data"
    ):
        meta = skills.front_matter(bytes(data[:SHOWN_BYTES]).decode("utf-8", "replace"))
        descriptions[entry_points[sha256]] = meta.description
    listed: list[dict[str, Any]] = [
        {
            "name": skill,
            "files": files,
            "description": descriptions.get(skill, ""),
            "deleted": all(f.deleted for f in files),
            "pending": sum(f.pending for f in files),
        }
        for skill, files in sorted(grouped.items())
    ]
    return render(
        request,
        "memoryui/skill_list.html",
        _base(
            request,
            layout,
            skills=listed,
            pending=[f for s in listed for f in s["files"] if f.pending],
        ),
    )


@dataclass
class ShownFile:
    path: str
    name: str
    anchor: str
    version: SkillFileVersion
    size: int
    deleted: bool
    text: str
    html: SafeString | None
    meta: skills.FrontMatter | None
    cut: bool
    problem: str | None
    editable: bool
    pending: bool


def _shown(version: SkillFileVersion, disk: dict[str, str | None]) -> ShownFile:
    data = None if version.blob is None else bytes(version.blob.data)
    raw = data or b""
    text, problem = tree.decode_text(raw)
    cut = len(raw) > SHOWN_BYTES
    if cut:
        head, _ = tree.decode_text(raw[: SHOWN_BYTES // 2])
        tail, _ = tree.decode_text(raw[-SHOWN_BYTES // 4 :])
        text = f"{head}\n\n… {tree.human_size(len(raw))} in all; middle not shown …\n\n{tail}"
    name = version.path.split("/", 2)[2]
    meta = None
    html = None
    if data is not None and name.lower().endswith(".md"):
        meta = skills.front_matter(text)
        html = render_markdown(meta.body)
        if not meta.present:
            meta = None
    path = version.path
    return ShownFile(
        path=path,
        name=name,
        anchor=file_anchor(path),
        version=version,
        size=len(data or b""),
        deleted=data is None,
        text=text,
        html=html,
        meta=meta,
        cut=cut,
        problem=problem,
        editable=data is not None and not cut and skills.is_text(data),
        pending=version.blob_id != disk.get(path) and not (data is None and path not in disk),
    )


@workspace_view(Role.VIEWER)
@require_GET
def skill_detail(request: HtmxHttpRequest, name: str, layout_pk: int, skill: str) -> HttpResponse:
    layout = request.layout
    if "/" in skill or skill in (".", ".."):
        raise Http404("No such skill.")
    versions = list(
        skills.current_versions(layout, prefix=f"skills/{skill}/").select_related("blob", "author")
    )
    if not versions:
        raise Http404("No such skill.")
    disk = skills.disk_state(layout)
    files = [_shown(v, disk) for v in versions]
    # SKILL.md first: it is the skill's entry point.
    files.sort(key=lambda f: (f.name != "SKILL.md", f.deleted, f.name))
    return render(
        request,
        "memoryui/skill_detail.html",
        _base(
            request,
            layout,
            skill=skill,
            files=[f for f in files if not f.deleted],
            deleted=[f for f in files if f.deleted],
            new_path=f"skills/{skill}/",
        ),
    )


# --- editing ------------------------------------------------------------------------------


def _current_or_404(layout: Layout, rel: str) -> SkillFileVersion:
    current = skills.latest(layout, rel)
    if current is None:
        raise Http404("No such skill file.")
    return current


@workspace_view(Role.EDITOR)
@require_http_methods(["GET", "POST"])
def skill_file_edit(
    request: HtmxHttpRequest, name: str, layout_pk: int, skill: str, file: str
) -> HttpResponse:
    """Edit a skill file. A save based on an outdated version is refused with both texts
    shown (409), so nobody's work is lost."""
    layout = request.layout
    rel = _rel(skill, file)
    current = _current_or_404(layout, rel)
    if current.deleted:
        raise Http404("This skill file is deleted; restore it from its history.")
    data = skills.data_of(current) or b""
    if not skills.is_text(data) or len(data) > SHOWN_BYTES:
        return bad_request(
            request,
            f"{rel} is not UTF-8 text of a size a page can edit; change it on disk.",
            back=_detail_url(layout, skill),
            workspace=layout.workspace,
        )
    context = _base(
        request,
        layout,
        rel=rel,
        skill=skill,
        file=file,
        text=data.decode("utf-8"),
        based_on=current.number,
        preview=None,
        cancel=_detail_url(layout, skill, file_anchor(rel)),
        action=_file_url("skill_file_edit", layout, rel),
    )
    if request.method == "GET":
        return render(request, "memoryui/skill_edit.html", context)
    form = forms.SkillFileForm(request.POST)
    if not form.is_valid():
        if set(form.errors) == {"text"}:  # too large: the editor again, with the text
            context.update(text=form.data.get("text", ""), errors=form.errors["text"])
            context["based_on"] = form.data.get("based_on", "")
            return render(request, "memoryui/skill_edit.html", context, status=400)
        return bad_request(request, form, workspace=layout.workspace)
    text = form.cleaned_data["text"].replace("\r\n", "\n")
    based_on = form.cleaned_data["based_on"]
    if form.cleaned_data["preview"]:
        context.update(text=text, based_on=based_on or "", preview=_preview(rel, text))
        return render(request, "memoryui/skill_edit.html", context)
    if based_on == current.number and text.encode("utf-8") == data:
        messages.info(request, "Nothing changed; no new version.")
        return redirect(_detail_url(layout, skill, file_anchor(rel)))
    try:
        version = skills.save(
            layout,
            rel,
            text.encode("utf-8"),
            user=request.user,
            based_on=based_on,
            action="skill.edit",
            reason="edited",
        )
    except skills.StaleSkill as exc:
        return _stale(request, context, text, exc)
    messages.success(request, f"Saved {rel} as version {version.number}.")
    return redirect(_detail_url(layout, skill, file_anchor(rel)))


def _preview(rel: str, text: str) -> dict[str, Any]:
    if not rel.lower().endswith(".md"):
        return {"meta": None, "html": None, "text": text}
    meta = skills.front_matter(text)
    return {"meta": meta if meta.present else None, "html": render_markdown(meta.body)}


def _stale(
    request: HtmxHttpRequest, context: dict[str, Any], text: str, exc: skills.StaleSkill
) -> HttpResponse:
    latest = exc.latest
    context.update(
        text=text,
        stale=True,
        theirs=skills.text_of(latest),
        theirs_deleted=latest is not None and latest.deleted,
        theirs_number=latest.number if latest else None,
        based_on=latest.number if latest else "",
    )
    return render(request, "memoryui/skill_edit.html", context, status=409)


@workspace_view(Role.EDITOR)
@require_http_methods(["GET", "POST"])
def skill_file_new(request: HtmxHttpRequest, name: str, layout_pk: int) -> HttpResponse:
    """Add a skill file (a new skill, or a file of an existing one)."""
    layout = request.layout
    context = _base(
        request,
        layout,
        new=True,
        text="",
        path="skills/",
        preview=None,
        cancel=reverse("memoryui:skill_list", args=[layout.workspace.name, layout.pk]),
        action=reverse("memoryui:skill_file_new", args=[layout.workspace.name, layout.pk]),
    )
    if request.method == "GET":
        prefill = forms.SkillPrefillForm(request.GET)
        if not prefill.is_valid():
            return bad_request(request, prefill, workspace=layout.workspace)
        if prefill.cleaned_data["path"]:
            context["path"] = prefill.cleaned_data["path"]
        return render(request, "memoryui/skill_edit.html", context)
    form = forms.NewSkillFileForm(request.POST)
    if not form.is_valid():
        context.update(
            text=form.data.get("text", "")[: 2 * skills.max_bytes()],
            path=form.data.get("path", "")[:300],
            errors=[e for errors in form.errors.values() for e in errors],
        )
        return render(request, "memoryui/skill_edit.html", context, status=400)
    rel, text = form.cleaned_data["path"], form.cleaned_data["text"].replace("\r\n", "\n")
    context.update(path=rel, text=text)
    if form.cleaned_data["preview"]:
        context["preview"] = _preview(rel, text)
        return render(request, "memoryui/skill_edit.html", context)
    current = skills.latest(layout, rel)
    if current is not None and not current.deleted:
        context["errors"] = [f"{rel} exists already: edit it instead."]
        context["existing"] = _file_url("skill_file_edit", layout, rel)
        return render(request, "memoryui/skill_edit.html", context, status=409)
    try:
        version = skills.save(
            layout,
            rel,
            text.encode("utf-8"),
            user=request.user,
            based_on=current.number if current else None,
            action="skill.add",
            reason="added",
        )
    except skills.StaleSkill:
        context["errors"] = [f"{rel} was added by someone else meanwhile: edit it instead."]
        return render(request, "memoryui/skill_edit.html", context, status=409)
    messages.success(request, f"Added {rel} (version {version.number}).")
    return redirect(_detail_url(layout, skills.skill_of(rel), file_anchor(rel)))


@workspace_view(Role.EDITOR)
@require_http_methods(["GET", "POST"])
def skill_file_delete(
    request: HtmxHttpRequest, name: str, layout_pk: int, skill: str, file: str
) -> HttpResponse:
    """Confirm, then delete a skill file (a new version saying it is deleted; the next
    write-back deletes it from disk)."""
    layout = request.layout
    rel = _rel(skill, file)
    current = _current_or_404(layout, rel)
    context = _base(
        request,
        layout,
        rel=rel,
        skill=skill,
        current=current,
        text=skills.text_of(current)[:SHOWN_BYTES],
        on_disk=rel in skills.disk_state(layout),
        action=_file_url("skill_file_delete", layout, rel),
        cancel=_detail_url(layout, skill, file_anchor(rel)),
    )
    if request.method == "GET":
        if current.deleted:
            raise Http404("This skill file is deleted already.")
        return render(request, "memoryui/skill_delete.html", context)
    form = forms.SkillChangeForm(request.POST)
    if not form.is_valid():
        return bad_request(request, form, workspace=layout.workspace)
    if current.deleted:
        messages.info(request, f"{rel} was deleted already.")
        return redirect(_after_delete(layout, skill))
    try:
        skills.save(
            layout,
            rel,
            None,
            user=request.user,
            based_on=form.cleaned_data["based_on"],
            action="skill.delete",
            reason="deleted",
        )
    except skills.StaleSkill as exc:
        context.update(stale=True, current=exc.latest, text=skills.text_of(exc.latest))
        return render(request, "memoryui/skill_delete.html", context, status=409)
    messages.success(request, f"Deleted {rel}; the next write-back deletes it from disk.")
    return redirect(_after_delete(layout, skill))


def _after_delete(layout: Layout, skill: str) -> str:
    remaining = (
        skills.current_versions(layout, prefix=f"skills/{skill}/").filter(blob__isnull=False)
    ).exists()
    if remaining:
        return _detail_url(layout, skill)
    return reverse("memoryui:skill_list", args=[layout.workspace.name, layout.pk])


# --- history --------------------------------------------------------------------------


@workspace_view(Role.VIEWER)
@require_GET
def skill_file_history(
    request: HtmxHttpRequest, name: str, layout_pk: int, skill: str, file: str
) -> HttpResponse:
    layout = request.layout
    rel = _rel(skill, file)
    form = forms.SkillVersionForm(request.GET)
    if not form.is_valid():
        return bad_request(request, form, workspace=layout.workspace)
    versions = list(
        SkillFileVersion.objects.filter(layout=layout, path=rel)
        .select_related("author")
        .annotate(size=F("blob__size"))
        .order_by("-number")
    )
    if not versions:
        raise Http404("No such skill file.")
    by_number = {v.number: v for v in versions}
    chosen_number = form.cleaned_data["version"]
    chosen = None
    rows = None
    if chosen_number is not None:
        if chosen_number not in by_number:
            raise Http404("No such version.")
        chosen = by_number[chosen_number]
        rows = diffs.side_by_side(skills.text_of(versions[0]), skills.text_of(chosen))
    return render(
        request,
        "memoryui/skill_history.html",
        _base(
            request,
            layout,
            rel=rel,
            skill=skill,
            file=file,
            versions=versions,
            current=versions[0],
            can_review=has_role(request.user, layout.workspace, Role.REVIEWER),
            chosen=chosen,
            chosen_text=skills.text_of(chosen)[:SHOWN_BYTES] if chosen else "",
            rows=rows,
            detail=_detail_url(layout, skill, file_anchor(rel)),
        ),
    )


@workspace_view(Role.REVIEWER)
@require_POST
def skill_file_accept(
    request: HtmxHttpRequest, name: str, layout_pk: int, skill: str, file: str, number: int
) -> HttpResponse:
    """Accept a sandbox's change to a skill file (reviewers): sandboxes get it from now
    on (the remote snapshot store serves no agent change before this)."""
    layout = request.layout
    rel = _rel(skill, file)
    version = get_object_or_404(
        SkillFileVersion, layout=layout, path=rel, number=number, needs_review=True
    )
    skills.accept_agent_change(version, user=request.user)
    messages.success(request, f"The agent's version {number} of {rel} is accepted.")
    return redirect(_file_url("skill_file_history", layout, rel))


@workspace_view(Role.EDITOR)
@require_http_methods(["GET", "POST"])
def skill_file_restore(
    request: HtmxHttpRequest, name: str, layout_pk: int, skill: str, file: str, number: int
) -> HttpResponse:
    """Confirm, then make an earlier version current again (as a new version)."""
    layout = request.layout
    rel = _rel(skill, file)
    current = _current_or_404(layout, rel)
    old = get_object_or_404(SkillFileVersion, layout=layout, path=rel, number=number)
    history = _file_url("skill_file_history", layout, rel)
    context = _base(
        request,
        layout,
        rel=rel,
        skill=skill,
        current=current,
        old=old,
        rows=diffs.side_by_side(skills.text_of(current), skills.text_of(old)),
        action=_file_url("skill_file_restore", layout, rel, number),
        cancel=history,
    )
    if request.method == "GET":
        return render(request, "memoryui/skill_restore.html", context)
    form = forms.SkillChangeForm(request.POST)
    if not form.is_valid():
        return bad_request(request, form, workspace=layout.workspace)
    try:
        version = skills.restore(
            layout, rel, number, user=request.user, based_on=form.cleaned_data["based_on"]
        )
    except skills.StaleSkill as exc:
        assert exc.latest is not None
        context.update(
            stale=True,
            current=exc.latest,
            rows=diffs.side_by_side(skills.text_of(exc.latest), skills.text_of(old)),
        )
        return render(request, "memoryui/skill_restore.html", context, status=409)
    messages.success(request, f"Version {number} of {rel} restored as version {version.number}.")
    return redirect(history)


# --- a proposal's skill changes ----------------------------------------------------------


@workspace_view(Role.REVIEWER)
@require_POST
def proposal_skill_decide(
    request: HtmxHttpRequest, name: str, layout_pk: int, pk: int
) -> HttpResponse:
    """Accept or reject one skill file change of a pending proposal; back to the review
    page's skills (the file's card alone for htmx)."""
    layout = request.layout
    proposal = get_object_or_404(
        Proposal.objects.select_related("layout__workspace").defer(
            "raw_memories_md", "selection", "memory_md", "memory_summary"
        ),
        pk=pk,
        layout=layout,
    )
    review = reverse("memoryui:proposal_review", args=[name, layout.pk, proposal.pk])
    form = forms.SkillDecideForm(request.POST)
    if not form.is_valid():
        return bad_request(request, form, back=review + "#skills", workspace=layout.workspace)
    path = form.cleaned_data["path"]
    if path not in (proposal.skill_changes or {}):
        return bad_request(
            request,
            f"{path} is not a skill file this proposal changes.",
            back=review + "#skills",
            workspace=layout.workspace,
        )
    try:
        skills.decide(proposal, path, form.cleaned_data["decision"], user=request.user)
    except curation.DecisionRefused as exc:
        template = "memoryui/proposal_refused.html" + ("#refusal" if request.htmx else "")
        return render(
            request,
            template,
            {
                "proposal": exc.proposal,
                "layout": layout,
                "workspace": layout.workspace,
                "attempted": "decision",
                "reason": str(exc),
            },
            status=409,
        )
    if request.htmx:
        change = next(c for c in consolidation.skill_diffs(proposal) if c["path"] == path)
        card = render_to_string(
            "memoryui/_skill_changes.html#skill-card",
            {
                "change": change,
                "proposal": proposal,
                "layout": layout,
                "workspace": layout.workspace,
                "can_review": True,
            },
            request=request,
        )
        return HttpResponse(card + progress_bar(request, proposal))
    return redirect(review + "#skills")
