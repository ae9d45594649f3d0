"""``{% load cards %}{% card_header %}``: the badges of the review card in the context
(``row``, ``card``, ``can_decide``, ``urls``), built by ``review_cards.header_html``."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.safestring import SafeString

from ..review_cards import header_html

register = template.Library()


@register.simple_tag(takes_context=True)
def card_header(context: Any) -> SafeString:
    urls = context.get("urls") or {}
    return header_html(
        context["card"],
        context["row"],
        can_decide=bool(context.get("can_decide")),
        duplicate_url=urls.get("duplicate", "") if hasattr(urls, "get") else "",
    )
