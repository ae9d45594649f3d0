"""``{% load mapping %}{{ some_dict|get:key }}``: a dict's value for a key a template has
in a variable (Django's dot lookup takes only literal keys)."""

from typing import Any

from django import template

register = template.Library()


@register.filter
def get(mapping: Any, key: Any) -> Any:
    return mapping.get(key) if hasattr(mapping, "get") else None
