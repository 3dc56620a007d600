"""The base of the displayed widgets: one model, shown as text and as HTML, maybe live.

A view renders its model twice, deterministically: ``text()`` (``text/plain``, what nbval
compares) and ``html()`` (``text/html``, what the built book shows). A view that also offers
a live ipywidgets form in a running kernel returns it from ``live_view()``; the controls
(`book.display.widgets.interactive`) work on any `View` through this interface (``render`` and
``error_html``), so they never import the module of the view that offers them.
"""

from __future__ import annotations

from typing import Any


class View:
    """A widget's display: subclasses define ``text`` and ``html``, and may offer ``live_view``."""

    def text(self) -> str:
        raise NotImplementedError

    def html(self) -> str:
        raise NotImplementedError

    def live_view(self) -> dict[str, Any] | None:
        """Extra mimebundle entries for a live kernel (an ipywidgets view), or None."""
        return None

    def __repr__(self) -> str:
        return self.text()

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        bundle: dict[str, Any] = {"text/plain": self.text(), "text/html": self.html()}
        live = self.live_view()
        if live is not None:
            bundle.update(live)
        return bundle
