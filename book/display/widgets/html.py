"""Small helpers shared by the widgets' static HTML: escaping, and styles that survive sanitizers.

The widgets' HTML must be self-contained (no external CSS, no JS) and must look the same wherever a
notebook is opened. A ``<style>`` block does not survive everywhere: JupyterLab sanitizes the HTML
outputs of a notebook it does not trust (every notebook a reader has not run or signed), and its
sanitizer drops ``<style>`` elements but keeps ``style=""`` attributes whose properties it knows.
So the views write their rules as a small stylesheet (readable, one place) and `inline` copies each
rule into the ``style`` attribute of every element it matches. Only rules that cannot be inlined
(pseudo-elements and pseudo-classes) stay in a ``<style>`` block; without them the output loses
nothing but ornaments.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from dataclasses import dataclass

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
MONO = "ui-monospace, SFMono-Regular, Menlo, Consolas, monospace"
SANS = "system-ui, -apple-system, Segoe UI, Roboto, sans-serif"


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def picture_css(root: str, label_width: int) -> str:
    """The rules chapter 16's pictures share, under the class `root`: a titled column of
    labelled rows, and a legend of colour swatches (`swatches`). Each picture adds the rules for
    what its rows draw."""
    return f"""
.{root} {{ font-family: {SANS}; font-size: 12px; margin: 4px 0; max-width: 760px; }}
.{root} .ember-title {{ font-weight: 600; margin-bottom: 4px; }}
.{root} .ember-row {{ display: flex; align-items: center; margin: 2px 0; }}
.{root} .ember-label {{ font-family: {MONO}; width: {label_width}px; min-width: {label_width}px;
  white-space: nowrap; overflow: hidden; }}
.{root} .ember-legend {{ color: #374151; margin-top: 4px; }}
.{root} .ember-swatch {{ display: inline-block; width: 10px; height: 10px;
  margin: 0 3px 0 10px; border-radius: 1px; }}
"""


def swatches(entries: Iterable[tuple[str, str]]) -> str:
    """A legend's entries, (colour, label) each: a coloured square, then the label."""
    return "".join(
        f'<span class="ember-swatch" style="background: {colour}"></span>{esc(label)}'
        for colour, label in entries
    )


def style(css: str) -> str:
    """A ``<style>`` block (for the rules `inline` cannot move into attributes)."""
    return f"<style>{' '.join(line.strip() for line in css.strip().splitlines())}</style>"


def kind_css(prefix: str) -> str:
    """`.{prefix}.ember-<kind>` colour rules for every entry kind."""
    rules = []
    for kind, (background, colour) in KIND_COLOURS.items():
        rules.append(f"{prefix}.ember-{kind} {{ background: {background}; color: {colour}; }}")
    return "\n".join(rules)


# ---- inlining a small stylesheet ----------------------------------------------------------
# Selectors: compounds of an optional tag, classes and [attribute]s, joined by descendant (space)
# or child (>) combinators, e.g. ".ember-trace details > .ember-leaf". Anything else (":", "::")
# stays in the <style> block.

_COMPOUND = re.compile(r"^([a-z][a-z0-9]*)?((?:\.[\w-]+)*)((?:\[[\w-]+\])*)$")
_TAG = re.compile(r"<(/?)([a-zA-Z][a-zA-Z0-9]*)((?:\s+[\w-]+(?:=\"[^\"]*\")?)*)\s*(/?)>")
_ATTR = re.compile(r"\s+([\w-]+)(?:=\"([^\"]*)\")?")
_VOID = {"br", "wbr", "hr", "img", "input", "col", "source", "track", "area"}


@dataclass(frozen=True)
class _Compound:
    tag: str | None
    classes: frozenset[str]
    attrs: frozenset[str]

    def matches(self, tag: str, classes: set[str], attrs: set[str]) -> bool:
        return (self.tag in (None, tag)) and self.classes <= classes and self.attrs <= attrs


@dataclass(frozen=True)
class _Rule:
    steps: tuple[tuple[str, _Compound], ...]  # (combinator before it, compound), last = subject
    declarations: tuple[tuple[str, str], ...]
    specificity: tuple[int, int]
    order: int


def _parse_selector(selector: str) -> tuple[tuple[str, _Compound], ...] | None:
    tokens = selector.replace(">", " > ").split()
    steps: list[tuple[str, _Compound]] = []
    combinator = " "
    for token in tokens:
        if token == ">":
            combinator = ">"
            continue
        m = _COMPOUND.match(token)
        if m is None or not token:
            return None
        classes = frozenset(c for c in m.group(2).split(".") if c)
        attrs = frozenset(a.strip("[]") for a in re.findall(r"\[[\w-]+\]", m.group(3)))
        steps.append((combinator, _Compound(m.group(1), classes, attrs)))
        combinator = " "
    return tuple(steps) or None


def _split_css(css: str) -> tuple[list[_Rule], str]:
    """The rules that can be inlined, and the rest as CSS text."""
    rules: list[_Rule] = []
    rest: list[str] = []
    for block in css.split("}"):
        if "{" not in block:
            continue
        selectors, body = block.split("{", 1)
        body = " ".join(body.split())
        declarations = tuple(
            (name.strip(), value.strip())
            for name, _, value in (d.partition(":") for d in body.split(";") if d.strip())
        )
        for selector in (s.strip() for s in selectors.split(",")):
            steps = _parse_selector(selector) if ":" not in selector else None
            if steps is None:
                rest.append(f"{selector} {{ {body} }}")
                continue
            ids = sum(len(c.classes) + len(c.attrs) for _, c in steps)
            tags = sum(c.tag is not None for _, c in steps)
            rules.append(_Rule(steps, declarations, (ids, tags), len(rules)))
    return rules, "\n".join(rest)


def _matches(steps: tuple[tuple[str, _Compound], ...], stack: list[tuple[str, set[str], set[str]]]) -> bool:
    """Does the element on top of `stack` (its ancestors below it) match the selector `steps`?"""
    *ancestors_steps, (combinator, subject) = steps
    if not subject.matches(*stack[-1]):
        return False
    position = len(stack) - 1
    for step_combinator, compound in reversed(ancestors_steps):
        if combinator == ">":
            position -= 1
            if position < 0 or not compound.matches(*stack[position]):
                return False
        else:
            position -= 1
            while position >= 0 and not compound.matches(*stack[position]):
                position -= 1
            if position < 0:
                return False
        combinator = step_combinator
    return True


def inline(markup: str, css: str) -> str:
    """`markup` with every inlinable rule of `css` written into the style attributes it applies to.

    Declarations are applied in CSS order (specificity, then source order); a style attribute the
    markup already has comes last and wins. Rules that cannot be inlined are put in a ``<style>``
    block at the start of the first element. The markup must be the widgets' own: double-quoted,
    escaped attribute values (`esc`).
    """
    rules, rest = _split_css(css)
    ordered = sorted(rules, key=lambda r: (r.specificity, r.order))
    stack: list[tuple[str, set[str], set[str]]] = []
    out: list[str] = []
    position = 0
    first = True
    for m in _TAG.finditer(markup):
        out.append(markup[position : m.start()])
        position = m.end()
        closing, tag, attr_text, self_closing = m.groups()
        tag = tag.lower()
        if closing:
            while stack and stack.pop()[0] != tag:
                pass
            out.append(m.group(0))
            continue
        attrs: list[tuple[str, str | None]] = [(a.group(1), a.group(2)) for a in _ATTR.finditer(attr_text)]
        names = {name for name, _ in attrs}
        classes = set((dict(attrs).get("class") or "").split())
        stack.append((tag, classes, names))
        declared: dict[str, str] = {}
        for rule in ordered:
            if _matches(rule.steps, stack):
                for name, value in rule.declarations:
                    declared.pop(name, None)  # keep the order of the winning declarations
                    declared[name] = value
        own = dict(attrs).get("style") or ""
        if own:
            for name, _, value in (d.partition(":") for d in html.unescape(own).split(";") if d.strip()):
                declared.pop(name.strip(), None)
                declared[name.strip()] = value.strip()
        attrs = [(name, value) for name, value in attrs if name != "style"]
        if declared:
            attrs.append(("style", esc("; ".join(f"{k}: {v}" for k, v in declared.items()))))
        text = "".join(f' {name}="{value}"' if value is not None else f" {name}" for name, value in attrs)
        out.append(f"<{tag}{text}{' /' if self_closing else ''}>")
        if first and rest:
            out.append(style(rest))
        first = False
        if tag in _VOID or self_closing:
            stack.pop()
    out.append(markup[position:])
    return "".join(out)
