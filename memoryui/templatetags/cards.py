"""``{% load cards %}{% card_header %}``, ``{% card_evidence %}`` and ``{% card_bar %}``:
the badges, the evidence and the form of the review card in the context (``row``,
``card``, ``can_decide``, ``can_edit``, ``urls``), built by ``card_html``."""

from __future__ import annotations

from typing import Any

from django import template
from django.template.defaulttags import CsrfTokenNode
from django.utils.safestring import SafeString

from ..card_html import bar_html, evidence_html, header_html

register = template.Library()


def _urls(context: Any) -> dict[str, str]:
    urls = context.get("urls")
    return urls if isinstance(urls, dict) else {}


@register.simple_tag(takes_context=True)
def card_header(context: Any) -> SafeString:
    return header_html(
        context["card"],
        context["row"],
        can_decide=bool(context.get("can_decide")),
        duplicate_url=_urls(context).get("duplicate", ""),
    )


@register.simple_tag(takes_context=True)
def card_bar(context: Any) -> SafeString:
    return bar_html(
        context["card"],
        context["row"],
        can_decide=bool(context.get("can_decide")),
        can_edit=bool(context.get("can_edit")),
        urls=_urls(context),
        csrf_input=_csrf_input(context),
    )


def _csrf_input(context: Any) -> str:
    """``{% csrf_token %}``'s input, built once for the page's cards: the token is the
    same for all of them (the request's), and each build looked it up through every
    layer of the context and formatted it anew."""
    kept = context.render_context.get(_CSRF_INPUT)
    if kept is None:
        kept = context.render_context[_CSRF_INPUT] = CsrfTokenNode().render(context)
    return str(kept)


_CSRF_INPUT = object()


@register.simple_tag(takes_context=True)
def card_evidence(context: Any) -> SafeString:
    return evidence_html(context["card"], context["row"])
