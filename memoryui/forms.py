from django import forms

from generation.tree import TERMINAL_STATES


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
        from .models import GenerationSettings

        model = GenerationSettings
        fields = [
            "phase_one_model",
            "phase_two_model",
            "reasoning_effort",
            "api",
            "max_raw_memories_for_consolidation",
            "concurrency",
            "extra_prompt",
        ]
        widgets = {"extra_prompt": forms.Textarea(attrs={"rows": 5})}

    def clean_extra_prompt(self) -> str:
        text = self.cleaned_data["extra_prompt"]
        self.extra_prompt_tokens = approx_tokens(text)
        return text


def approx_tokens(text: str) -> int:
    from generation.summary import approx_tokens as count

    return count(text)


def _new_workspace_name(name: str) -> str:
    from .importer import valid_workspace_name
    from .models import Workspace

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
    import re

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
        data = super().clean()
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

    def clean_path(self):  # type: ignore[no-untyped-def]
        from .workspaces import PathRefused, resolve_source

        try:
            return resolve_source(self.cleaned_data["path"], directory_only=True)
        except PathRefused as exc:
            raise forms.ValidationError(str(exc)) from exc

    def clean(self) -> dict:
        from .importer import default_name

        data = super().clean()
        if data.get("path") is not None:
            try:
                data["name"] = _new_workspace_name(data.get("name") or default_name(data["path"]))
            except forms.ValidationError as exc:
                self.add_error("name", exc)
        return data


class SyncForm(forms.ModelForm):
    class Meta:
        from .models import Workspace

        model = Workspace
        fields = ["sync_interval_minutes"]
        widgets = {"sync_interval_minutes": forms.NumberInput(attrs={"min": 0, "step": 1})}
