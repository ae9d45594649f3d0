"""The ``markdown`` template filter: model-written markdown rendered safely
(``memoryui.rendering``)."""

from __future__ import annotations

from django import template
from django.utils.safestring import SafeString

from ..rendering import render_markdown

register = template.Library()


@register.filter(name="markdown")
def markdown_filter(text: str) -> SafeString:
    return render_markdown(text)
