"""Small helpers shared by the widgets' static HTML: escaping, one style block."""

from __future__ import annotations

import html

# Colours per table entry kind, readable on a light page. The book's own
# registrations ("ours") get the ember orange.
KIND_COLOURS = {
    "kernel": ("#dbeafe", "#1e3a8a"),
    "fallback": ("#fef3c7", "#78350f"),
    "fallthrough": ("#f3f4f6", "#6b7280"),
    "alias": ("#ede9fe", "#4c1d95"),
    "nothing": ("#ffffff", "#9ca3af"),
}
OURS = "#ea580c"


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def style(css: str) -> str:
    """An inline style block (outputs must be self-contained: no external CSS, no JS)."""
    return f"<style>{' '.join(line.strip() for line in css.strip().splitlines())}</style>"


def kind_css(prefix: str) -> str:
    """`.{prefix}.ember-<kind>` colour rules for every entry kind."""
    rules = []
    for kind, (background, colour) in KIND_COLOURS.items():
        rules.append(f"{prefix}.ember-{kind} {{ background: {background}; color: {colour}; }}")
    return "\n".join(rules)
