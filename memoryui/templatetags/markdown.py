"""Render model-written markdown safely: raw HTML off, unsafe links dropped."""

from django import template
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt

register = template.Library()

# "js-default": CommonMark with raw HTML disabled and validateLink refusing
# javascript:, vbscript:, file: and data: (except images) URLs. Tables and
# strikethrough are on, as GitHub renders memory files.
_md = MarkdownIt("js-default").enable(["table", "strikethrough"])


def _heading_open(self, tokens, idx, options, env):
    anchors = env.get("anchors")
    if anchors:
        tokens[idx].attrSet("id", anchors.pop(0))
    return self.renderToken(tokens, idx, options, env)


_md.add_render_rule("heading_open", _heading_open)


def render_markdown(text: str, anchors: list[str] | None = None) -> SafeString:
    """Render untrusted markdown; ``anchors`` become the ids of its headings, in order."""
    env = {"anchors": list(anchors)} if anchors else {}
    return mark_safe(_md.render(text or "", env))  # noqa: S308 - escaped by markdown-it


@register.filter(name="markdown")
def markdown_filter(text: str) -> SafeString:
    return render_markdown(text)
