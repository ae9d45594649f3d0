"""Every form of the dashboard, by room: what a person types or a page's query string
carries is checked here before a view uses it (a view answers an invalid form with 400
and the form's messages). The admin's own ModelForm stays in ``admin.py``."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, cast

from django import forms
from django.conf import settings
from django.contrib.auth import get_user_model

from generation.export import SNAPSHOT_ID_RE
from generation.summary import approx_tokens as count
from generation.tree import TERMINAL_STATES

from . import outbound, webhooks
from .importer import default_name, valid_workspace_name
from .models import GenerationSettings, MemoryVersion, Proposal, Role, Workspace
from .skills import new_path_problem
from .workspaces import PathRefused, resolve_source

if TYPE_CHECKING:
    from .models import Layout


class RolloutFilterForm(forms.Form):
    q = forms.CharField(required=False, max_length=200, label="Search")
    state = forms.ChoiceField(
        required=False,
        choices=[("", "any state")]
        + [(s, s.replace("_", " ")) for s in TERMINAL_STATES]
        + [("unknown", "unknown")],
    )
    since = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    memory = forms.ChoiceField(
        required=False,
        choices=[("", "with or without"), ("some", "with a raw memory"), ("none", "no memory")],
        label="Raw memory",
    )
    selection = forms.ChoiceField(
        required=False,
        choices=[
            ("", "any"),
            ("selected", "used by the last consolidation"),
            ("forgotten", "forgotten by it"),
        ],
        label="Consolidation",
    )


class GenerationSettingsForm(forms.ModelForm):
    class Meta:
        model = GenerationSettings
        fields = [
            "phase_one_model",
            "phase_two_model",
            "reasoning_effort",
            "api",
            "max_raw_memories_for_consolidation",
            "concurrency",
            "extra_prompt",
            "prompt_set",
            "phase_two_max_turns",
            "phase_two_token_budget",
            "select_by_usage",
            "selection_unused_days",
            "required_approvals",
            "judge_entries",
        ]
        widgets = {"extra_prompt": forms.Textarea(attrs={"rows": 5})}

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # Left out of a post (an older form, a script): keep what the layout has.
        for name in (
            "prompt_set",
            "phase_two_max_turns",
            "selection_unused_days",
            "required_approvals",
        ):
            self.fields[name].required = False

    def clean_required_approvals(self) -> int:
        return self.cleaned_data.get("required_approvals") or self.instance.required_approvals

    def clean_prompt_set(self) -> str:
        return self.cleaned_data.get("prompt_set") or self.instance.prompt_set

    def clean_selection_unused_days(self) -> int:
        return self.cleaned_data.get("selection_unused_days") or self.instance.selection_unused_days

    def clean_phase_two_max_turns(self) -> int:
        return self.cleaned_data.get("phase_two_max_turns") or self.instance.phase_two_max_turns

    def clean_extra_prompt(self) -> str:
        text = self.cleaned_data["extra_prompt"]
        self.extra_prompt_tokens = approx_tokens(text)
        return text


def approx_tokens(text: str) -> int:

    return count(text)


# --- people's input to review and curation ---------------------------------------------
# Every parameter a view reads goes through a form: text fields refuse NUL characters
# (Django's CharField; PostgreSQL cannot store them), sizes are capped, numbers are
# numbers. A view answers an invalid form with 400 and the form's messages.


def _size_validator(setting: str, what: str):
    def validate(value: str) -> None:

        limit = getattr(settings, setting)
        size = len(value.encode("utf-8", "replace"))
        if size > limit:
            raise forms.ValidationError(
                f"{what} is {size:,} bytes; the limit is {limit:,} bytes "
                f"({limit / 1024:g} KiB, {setting}). Nothing was saved.",
                code="too_long",
            )

    return validate


def normalize_newlines(text: str) -> str:
    """Text as memoryui stores and counts it: a browser's CRLF (and a lone CR) as LF."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


class DocumentText(forms.CharField):
    """Text from a text box, with its line endings normalised before any validator
    runs: the size limit counts the bytes that are saved, as the editor's meter does."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        kwargs.setdefault("strip", False)
        super().__init__(**kwargs)

    def to_python(self, value: Any) -> str:
        return normalize_newlines(super().to_python(value) or "")


entry_size = _size_validator("MEMORYUI_MAX_ENTRY_BYTES", "This entry")
comment_size = _size_validator("MEMORYUI_MAX_COMMENT_BYTES", "This comment")
summary_text_size = _size_validator("MEMORYUI_MAX_ENTRY_BYTES", "This text")
KEY_LENGTH = 600  # EntryDecision.key, Pin.key, Comment.key


def _documents() -> list[tuple[str, str]]:

    return list(MemoryVersion.Document.choices)


class AnchorField(forms.RegexField):
    """The id of an element to go back to (``#entry-...``)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(
            regex=r"^[A-Za-z0-9_-]*$",
            max_length=100,
            required=False,
            error_messages={"invalid": "Not an element id."},
            **kwargs,
        )


class EntryKeysField(forms.Field):
    """One or more entry keys (``key`` repeated)."""

    widget = forms.MultipleHiddenInput

    def clean(self, value: Any) -> list[str]:
        keys = [str(v) for v in value or []]
        for key in keys:
            if "\x00" in key:
                raise forms.ValidationError("Null characters are not allowed.")
            if len(key) > KEY_LENGTH:
                raise forms.ValidationError(f"An entry key has at most {KEY_LENGTH} characters.")
        return keys


class PageForm(forms.Form):
    """``?page=``: a page number (past the last: the last page), or nothing (the first)."""

    page = forms.IntegerField(
        min_value=1,
        max_value=10**6,
        required=False,
        error_messages={"invalid": "Enter a page number (1, 2, 3 ...)."},
    )


USAGE_FILTERS = [("", "All entries"), ("never", "Never read"), ("failing", "Read by failing runs")]


class VersionForm(forms.Form):
    """``?version=`` (and the entry finder) of the MEMORY.md and summary pages."""

    version = forms.IntegerField(required=False, min_value=1)
    q = forms.CharField(required=False, max_length=200)
    # MEMORY.md's entries by how agents used them (``memoryui.usage``).
    usage = forms.ChoiceField(required=False, choices=USAGE_FILTERS)


class CompareForm(forms.Form):
    a = forms.IntegerField(required=False, min_value=1)
    b = forms.IntegerField(required=False, min_value=1)
    page = forms.IntegerField(required=False, min_value=1, max_value=100_000)


class AuditFilterForm(forms.Form):
    action = forms.CharField(required=False, max_length=64)
    actor = forms.CharField(required=False, max_length=150)
    format = forms.ChoiceField(required=False, choices=[("", "page"), ("csv", "CSV")])


class EntryForm(forms.Form):
    """An entry edited (``key``), deleted (empty text) or added (no key)."""

    key = forms.CharField(required=False, max_length=KEY_LENGTH, strip=False)
    based_on = forms.IntegerField(required=False, min_value=1)
    text = DocumentText(validators=[entry_size])
    preview = forms.BooleanField(required=False)


class SummaryEditForm(forms.Form):
    """memory_summary.md's editor: one section (``key``), a new section (``add``) or
    the whole file (neither). ``preview`` asks for the meter and previews only;
    ``confirm_cut`` accepts that agents will not see that many tokens of a file over the
    cap."""

    key = forms.CharField(required=False, max_length=KEY_LENGTH, strip=False)
    add = forms.BooleanField(required=False)
    based_on = forms.IntegerField(required=False, min_value=1, max_value=2**31 - 1)
    text = DocumentText(validators=[summary_text_size])
    preview = forms.BooleanField(required=False)
    # "Save anyway": the number of cut tokens the person saw and accepted; a save that
    # would cut more is refused again.
    confirm_cut = forms.CharField(required=False, max_length=12)

    def clean_confirm_cut(self) -> int | None:
        value = self.cleaned_data["confirm_cut"].strip()
        if not value:
            return None
        if not (value.isascii() and value.isdigit()):
            raise forms.ValidationError(
                "“Save anyway” carries the number of tokens the cap cuts, as a whole number."
            )
        return int(value)

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        if data.get("key") and data.get("add"):
            raise forms.ValidationError("Edit a section or add one, not both.")
        return data

    @property
    def too_long(self) -> bool:
        """Invalid only because the text is over the size limit (the editor shows it
        again, with the text, instead of a bare 400)."""
        problems = self.errors.as_data()
        return set(problems) == {"text"} and all(e.code == "too_long" for e in problems["text"])


class PinForm(forms.Form):
    key = forms.CharField(max_length=KEY_LENGTH, strip=False)
    action = forms.ChoiceField(choices=[("pin", "pin"), ("unpin", "unpin")], required=False)


class DecideForm(forms.Form):
    document = forms.ChoiceField(choices=_documents)
    decision = forms.ChoiceField(choices=[("accept", "accept"), ("reject", "reject")])
    key = EntryKeysField(required=False)
    all = forms.BooleanField(required=False)
    edited_text = DocumentText(validators=[entry_size])
    anchor = AnchorField()


class CommentForm(forms.Form):
    text = forms.CharField(validators=[comment_size])
    document = forms.ChoiceField(required=False, choices=lambda: [("", "")] + _documents())
    key = forms.CharField(required=False, max_length=KEY_LENGTH, strip=False)
    # A line of the entry's text (from 1), for a comment on that line.
    line = forms.IntegerField(required=False, min_value=1, max_value=100_000)
    anchor = AnchorField()

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("line") and not data.get("key"):
            raise forms.ValidationError("A comment on a line needs the entry it is in.")
        return data


class AssignForm(forms.Form):
    reviewer: forms.ModelChoiceField[Any] = forms.ModelChoiceField(
        queryset=None,
        required=False,
        error_messages={"invalid_choice": "No such person."},
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:

        super().__init__(*args, **kwargs)
        reviewer = cast("forms.ModelChoiceField[Any]", self.fields["reviewer"])
        reviewer.queryset = get_user_model().objects.all()


class AgentChangeForm(forms.Form):
    action = forms.ChoiceField(
        required=False, choices=[("", "accept"), ("accept", "accept"), ("revert", "revert")]
    )


class ProposalOriginForm(forms.Form):
    """Which proposals a list shows: all, or those from one origin (``Proposal.Origin``)."""

    origin = forms.ChoiceField(
        required=False, choices=[("", "any origin"), *Proposal.Origin.choices]
    )


class ProtectForm(forms.Form):
    rollout_id = forms.CharField(max_length=128)
    next = forms.CharField(required=False, max_length=2000)
    action = forms.ChoiceField(
        choices=[("protect", "protect"), ("unprotect", "unprotect")], required=False
    )


def _new_workspace_name(name: str) -> str:

    if not valid_workspace_name(name):
        raise forms.ValidationError(
            f"{name!r} is not a valid workspace name: use letters, digits, '.', '_' or '-' "
            "(up to 100, starting with a letter or digit)."
        )
    if Workspace.objects.filter(name=name).exists():
        raise forms.ValidationError(f"A workspace called {name} already exists.")
    return name


ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")


def archive_suffix(filename: str) -> str:
    lower = filename.lower()
    return next(
        (s for s in sorted(ARCHIVE_SUFFIXES, key=len, reverse=True) if lower.endswith(s)), ""
    )


def name_from_file(filename: str) -> str:

    stem = filename[: len(filename) - len(archive_suffix(filename))] or filename
    return re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-._")[:100] or "workspace"


class SnapshotUploadForm(forms.Form):
    name = forms.CharField(
        required=False,
        max_length=100,
        help_text="Letters, digits, '.', '_' or '-'. Empty: from the file's name.",
    )
    snapshot = forms.FileField(
        label="SDK snapshot",
        widget=forms.ClearableFileInput(attrs={"accept": ",".join(ARCHIVE_SUFFIXES)}),
    )

    def clean(self) -> dict:
        super().clean()
        data = self.cleaned_data
        upload = data.get("snapshot")
        if upload is not None:
            try:
                data["name"] = _new_workspace_name(data.get("name") or name_from_file(upload.name))
            except forms.ValidationError as exc:
                self.add_error("name", exc)
        return data


class DirectoryForm(forms.Form):
    path = forms.CharField(
        max_length=1024,
        label="Directory",
        help_text="A sandbox workspace directory under one of the workspace roots: an "
        "absolute path, or one relative to a root.",
    )
    name = forms.CharField(
        required=False,
        max_length=100,
        help_text="Letters, digits, '.', '_' or '-'. Empty: from the directory's name.",
    )

    def clean_path(self):

        try:
            return resolve_source(self.cleaned_data["path"], directory_only=True)
        except PathRefused as exc:
            raise forms.ValidationError(str(exc)) from exc

    def clean(self) -> dict:

        super().clean()

        data = self.cleaned_data
        if data.get("path") is not None:
            try:
                data["name"] = _new_workspace_name(data.get("name") or default_name(data["path"]))
            except forms.ValidationError as exc:
                self.add_error("name", exc)
        return data


class SyncForm(forms.ModelForm):
    class Meta:
        model = Workspace
        fields = ["sync_interval_minutes"]
        widgets = {"sync_interval_minutes": forms.NumberInput(attrs={"min": 0, "step": 1})}


_HOSTNAME = re.compile(r"^(?=.{1,253}$)(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$")


class KnownHostsForm(forms.ModelForm):
    class Meta:
        model = Workspace
        fields = ["known_hosts"]
        widgets = {"known_hosts": forms.Textarea(attrs={"rows": 4})}

    def clean_known_hosts(self) -> str:
        hosts = [h.strip().lower().rstrip(".") for h in self.cleaned_data["known_hosts"].split()]
        bad = [h for h in hosts if not _HOSTNAME.match(h)]
        if bad:
            raise forms.ValidationError(
                f"Not a host name: {', '.join(bad[:5])} "
                "(one host a line, such as docs.example.com)."
            )
        return "\n".join(dict.fromkeys(hosts))


# --- skill files ------------------------------------------------------------------------

skill_file_size = _size_validator("MEMORYUI_MAX_SKILL_FILE_BYTES", "This skill file")


def version_number(*, required: bool = True) -> forms.IntegerField:
    """A version number as the database keeps it (a positive 32-bit integer)."""
    return forms.IntegerField(required=required, min_value=1, max_value=2**31 - 1)


class SkillFileForm(forms.Form):
    """A skill file's new text, based on the version the editor was opened with."""

    based_on = version_number(required=False)
    text = forms.CharField(required=False, strip=False, validators=[skill_file_size])
    preview = forms.BooleanField(required=False)


class NewSkillFileForm(forms.Form):
    path = forms.CharField(
        max_length=300,
        strip=True,
        help_text="Relative to the memories dir: skills/<name>/SKILL.md, "
        "skills/<name>/scripts/<tool>.py...",
    )
    text = forms.CharField(required=False, strip=False, validators=[skill_file_size])
    preview = forms.BooleanField(required=False)

    def clean_path(self) -> str:

        path = self.cleaned_data["path"]
        problem = new_path_problem(path)
        if problem:
            raise forms.ValidationError(problem)
        return path


class SkillPrefillForm(forms.Form):
    """The add page opened for a skill (``?path=skills/<name>/``)."""

    path = forms.CharField(required=False, max_length=300)


class SkillChangeForm(forms.Form):
    """A delete or a restore: the version it was confirmed against."""

    based_on = version_number()


class SkillVersionForm(forms.Form):
    version = version_number(required=False)


class SkillDecideForm(forms.Form):
    path = forms.CharField(max_length=1024, strip=False)
    decision = forms.ChoiceField(choices=[("accept", "accept"), ("reject", "reject")])


class ForgottenDecideForm(SkillDecideForm):
    """A file an agent forgot: accept its removal (forget it) or reject it (keep it)."""


# --- the review page: where a reviewer is (filter, page), per-entry actions ------------

REVIEW_FILTERS = [
    ("", "changes"),
    ("undecided", "undecided"),
    ("changed", "changed text"),
    ("flagged", "flagged"),
    ("risk", "risk"),
    ("all", "all entries"),
]


class ReviewPlaceForm(forms.Form):
    """Which entries the review page lists (``show``) and which page of each document;
    an entry action posts them back so the reviewer lands where they were."""

    show = forms.ChoiceField(choices=REVIEW_FILTERS, required=False)
    all = forms.BooleanField(required=False)  # the older "show unchanged too" link
    page_memory_md = forms.IntegerField(min_value=1, max_value=10**6, required=False)
    page_memory_summary = forms.IntegerField(min_value=1, max_value=10**6, required=False)
    page = forms.IntegerField(min_value=1, max_value=10**6, required=False)

    def place(self, document: str = "") -> dict[str, str]:
        """The query string values to go back to (empty ones left out)."""
        data = self.cleaned_data
        show = data.get("show") or ("all" if data.get("all") else "")
        out = {"show": show} if show else {}
        for doc in ("memory_md", "memory_summary"):
            value = data.get("page") if doc == document else None
            value = value or data.get(f"page_{doc}")
            if value and value > 1:
                out[f"page_{doc}"] = str(value)
        return out


class EntryActionForm(ReviewPlaceForm):
    """One entry of a proposal: undo, viewed, pin."""

    document = forms.ChoiceField(choices=_documents)
    key = forms.CharField(max_length=KEY_LENGTH, strip=False)
    anchor = AnchorField()
    action = forms.ChoiceField(
        choices=[("", ""), ("on", "on"), ("off", "off"), ("pin", "pin"), ("unpin", "unpin")],
        required=False,
    )


class DecidePlaceForm(DecideForm, ReviewPlaceForm):
    pass


class CommentPlaceForm(CommentForm, ReviewPlaceForm):
    pass


class DuplicateAckForm(ReviewPlaceForm):
    """A reviewer's word on one likely duplicate pair (``first``, ``second``: its
    entries' keys): keep both, not a duplicate, or (empty) take it back. ``key``: the
    card it was said on (the one the answer shows)."""

    document = forms.ChoiceField(choices=_documents)
    key = forms.CharField(max_length=KEY_LENGTH, strip=False)
    first = forms.CharField(max_length=KEY_LENGTH, strip=False)
    second = forms.CharField(max_length=KEY_LENGTH, strip=False)
    anchor = AnchorField()
    ack = forms.ChoiceField(
        choices=[("keep", "keep both"), ("different", "not a duplicate"), ("", "undo")],
        required=False,
    )


class ApproveForm(forms.Form):
    undecided = forms.ChoiceField(
        choices=[
            ("accept", "take the model's text"),
            ("reject", "keep the current text (reject them)"),
        ],
        required=False,
        error_messages={"invalid_choice": "Choose the model's text or the current text."},
    )
    # Approve even though the result holds likely duplicates (listed in the dialog).
    duplicates_ok = forms.BooleanField(required=False)


class RequestChangesForm(forms.Form):
    """The third outcome of a review: close the proposal without applying it, saying
    what the next one should change."""

    message = forms.CharField(
        validators=[comment_size],
        error_messages={"required": "Say what should change: the next proposal shows it."},
    )


# --- export -------------------------------------------------------------------------


class ExportForm(forms.Form):
    DESTINATIONS = [("server", "Snapshot directory on the server"), ("download", "Download")]

    layouts = forms.MultipleChoiceField(
        required=False, widget=forms.CheckboxSelectMultiple, help_text="None ticked: every layout."
    )
    snapshot_id = forms.RegexField(
        regex=SNAPSHOT_ID_RE,
        max_length=128,
        error_messages={
            "invalid": "1-128 letters, digits, '.', '_' or '-', starting with a letter or digit."
        },
    )
    destination = forms.ChoiceField(choices=DESTINATIONS, widget=forms.RadioSelect)
    session_state = forms.BooleanField(
        required=False,
        label="Also write the session state that resumes it (server only)",
    )

    def __init__(self, *args: Any, layouts: list[Layout], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = cast(forms.MultipleChoiceField, self.fields["layouts"])
        field.choices = [(lay.memories_dir, lay.memories_dir) for lay in layouts]


# --- members and API tokens ---------------------------------------------------------


class AddMemberForm(forms.Form):
    username = forms.CharField(max_length=150)
    role = forms.ChoiceField(choices=Role.choices, initial=Role.VIEWER)


class MemberForm(forms.Form):
    role = forms.ChoiceField(choices=Role.choices, required=False)
    remove = forms.BooleanField(required=False)


EXPIRY_CHOICES = [("30", "30 days"), ("90", "90 days"), ("365", "1 year"), ("", "never")]


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100)
    workspaces = forms.MultipleChoiceField(widget=forms.CheckboxSelectMultiple)
    expires_in_days = forms.ChoiceField(choices=EXPIRY_CHOICES, initial="90", required=False)

    def __init__(self, *args, workspaces: list[str], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        field = cast(forms.MultipleChoiceField, self.fields["workspaces"])
        field.choices = [(n, n) for n in workspaces]


# --- webhooks -----------------------------------------------------------------------


class WebhookForm(forms.Form):
    url = forms.URLField(
        label="Receiver URL",
        max_length=1000,
        assume_scheme="https",
        widget=forms.URLInput(
            attrs={"placeholder": "https://ci.example.com/memoryui-hook", "size": 60}
        ),
    )
    events = forms.MultipleChoiceField(
        choices=webhooks.EVENTS,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="None ticked: every event.",
    )

    def clean_url(self) -> str:
        url = self.cleaned_data["url"]
        try:
            outbound.validate_target(url)
        except outbound.Refused as exc:
            raise forms.ValidationError(f"This receiver is refused: {exc}.") from exc
        return url
