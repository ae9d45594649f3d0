"""A document's versions as curation reads them: the latest, the latest approved and a
version's text."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from functools import reduce

from django.db.models import Q, QuerySet, Subquery

from .. import documents, versioning
from ..models import Layout, MemoryVersion


def latest(layout: Layout, document: str) -> MemoryVersion | None:
    return versioning.latest(MemoryVersion, layout, document=document)


def latest_approved(layout: Layout, document: str) -> MemoryVersion | None:
    """The newest version not awaiting review: what sandboxes are served (lint aside),
    and what a proposal's decisions are merged with."""
    return _approved(layout, document).first()


def latest_approved_each(
    layout: Layout, documents: Sequence[str]
) -> dict[str, MemoryVersion | None]:
    """``latest_approved`` of each of ``documents``, in one query."""
    newest = [Q(pk=Subquery(_approved(layout, d).values("pk")[:1])) for d in documents]
    found = {v.document: v for v in MemoryVersion.objects.filter(reduce(operator.or_, newest))}
    return {document: found.get(document) for document in documents}


def _approved(layout: Layout, document: str) -> QuerySet[MemoryVersion]:
    """The document's versions not awaiting review, newest first."""
    return MemoryVersion.objects.filter(
        layout=layout, document=document, needs_review=False
    ).order_by("-number")


def text_of(version: MemoryVersion | None) -> str:
    """A version's text ("" for none or a deletion): the same object on every call, so
    the comparison caches keyed by it answer by identity (``documents.text``)."""
    if version is None or version.blob_id is None:
        return ""
    return documents.text(version.blob_id)
