"""Render model-written markdown safely: raw HTML off, unsafe links dropped.

Below both the services (``documents``) and the pages (the ``markdown`` template filter,
the views), so that services never import from the web layer."""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

from django.utils.safestring import SafeString, mark_safe

if TYPE_CHECKING:
    from markdown_it import MarkdownIt


@cache
def _markdown() -> MarkdownIt:
    """The renderer, built on first use (commands that render nothing never load it).

    "js-default": CommonMark with raw HTML disabled and validateLink refusing
    javascript:, vbscript:, file: and data: (except images) URLs. Tables and
    strikethrough are on, as GitHub renders memory files."""
    from markdown_it import MarkdownIt  # noqa: PLC0415 (deferred: loaded by the first page that renders)

    md = MarkdownIt("js-default").enable(["table", "strikethrough"])
    md.add_render_rule("heading_open", _heading_open)
    return md


def _heading_open(self, tokens, idx, options, env):
    anchors = env.get("anchors")
    if anchors:
        tokens[idx].attrSet("id", anchors.pop(0))
    return self.renderToken(tokens, idx, options, env)


def render_markdown(text: str, anchors: list[str] | None = None) -> SafeString:
    """Render untrusted markdown; ``anchors`` become the ids of its headings, in order."""
    env = {"anchors": list(anchors)} if anchors else {}
    return mark_safe(_markdown().render(text or "", env))  # noqa: S308 - escaped by markdown-it
