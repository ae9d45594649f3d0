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
            "prompt_set",
            "phase_two_max_turns",
            "phase_two_token_budget",
        ]
        widgets = {"extra_prompt": forms.Textarea(attrs={"rows": 5})}

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        # Left out of a post (an older form, a script): keep what the layout has.
        for name in ("prompt_set", "phase_two_max_turns"):
            self.fields[name].required = False

    def clean_prompt_set(self) -> str:
        return self.cleaned_data.get("prompt_set") or self.instance.prompt_set

    def clean_phase_two_max_turns(self) -> int:
        return self.cleaned_data.get("phase_two_max_turns") or self.instance.phase_two_max_turns

    def clean_extra_prompt(self) -> str:
        text = self.cleaned_data["extra_prompt"]
        self.extra_prompt_tokens = approx_tokens(text)
        return text


def approx_tokens(text: str) -> int:
    from generation.summary import approx_tokens as count

    return count(text)
