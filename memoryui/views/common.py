"""What every page module shares: the request type the views see, the 400 page,
a few small helpers for lists and review anchors. Kept small on purpose: a helper moves
here only once two rooms use it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, overload

from django import forms
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.text import Truncator
from django_htmx.middleware import HtmxDetails

from .. import figures
from ..models import Layout, MemoryVersion, Workspace


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails
    workspace: Workspace  # set by roles.workspace_view
    layout: Layout


def bad_request(
    request: HttpRequest, problem: forms.Form | str, *, back: str = "", **context: object
) -> HttpResponse:
    """400, saying what was wrong: a form's messages, or one sentence."""
    if isinstance(problem, forms.Form):
        errors = [
            f"{(problem.fields[name].label or name.replace('_', ' ')).capitalize()}: "
            + " ".join(map(str, messages_))
            if name in problem.fields
            else " ".join(map(str, messages_))
            for name, messages_ in problem.errors.items()
        ]
    else:
        errors = [problem]
    context.update(errors=errors, back=back)
    return render(request, "memoryui/bad_request.html", context, status=400)


DOCUMENTS = {d.value for d in MemoryVersion.Document}


def document_or_404(value: str) -> str:
    """The route's document (``memory_md`` or ``memory_summary``), or 404."""
    if value not in DOCUMENTS:
        raise Http404("No such document.")
    return value


def cut_chars(text: str, length: int) -> str:
    """The ``truncatechars`` filter, without its walk over every character when the
    text is short enough to be shown whole."""
    return text if len(text) <= length else Truncator(text).chars(length)


class KeysThenRows(Sequence[Any]):
    """What a Paginator pages through: a page's primary keys first (the offset walks
    the ordering's index alone, even on page 100), then only that page's rows from
    ``rows``, joined and annotated, in the same order.

    ``read_once``: the keys' query is costly whatever the page (a text search scans
    every document), so it runs once, its keys counted and sliced here, instead of once
    for the count and again for the page. ``kept``: the workspace and a name under
    which the count (or the keys read once) are kept until its next import
    (``figures``): for a query whose answer only an import can change."""

    ordered = True

    def __init__(
        self,
        keys: QuerySet,
        rows: QuerySet,
        *,
        read_once: bool = False,
        kept: tuple[Workspace, str] | None = None,
    ) -> None:
        self.keys, self.rows, self.kept = keys, rows, kept
        self.all_keys: list[Any] | None = None
        if read_once:
            self.all_keys = self._kept("keys", lambda: list(keys.values_list("pk", flat=True)))

    def _kept(self, what: str, compute: Callable[[], Any]) -> Any:
        if self.kept is None:
            return compute()
        workspace, name = self.kept
        return figures.cached(workspace, f"{name}:{what}", compute)

    def __len__(self) -> int:  # what the Paginator counts
        if self.all_keys is not None:
            return len(self.all_keys)
        return self._kept("count", self.keys.count)

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...
    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, int):
            return self[index : index + 1][0]
        if self.all_keys is not None:
            pks = self.all_keys[index]
        else:
            pks = list(self.keys.values_list("pk", flat=True)[index])
        found = {row.pk: row for row in self.rows.filter(pk__in=pks)}
        return [found[pk] for pk in pks if pk in found]
