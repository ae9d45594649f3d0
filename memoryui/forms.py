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
