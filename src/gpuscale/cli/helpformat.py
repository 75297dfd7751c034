"""Help laid out so that option names, flags and examples are never cut.

Click's wrapper breaks ``gpu-lost@600`` after ``gpu-``, and Typer's rich layout
cuts option names on a narrow terminal. ``plain_help`` gives a command, and every
command below it, Click's plain layout with a wrapper that breaks at spaces only.
"""

import textwrap
from collections.abc import Callable, Sequence
from typing import Any


def _wrap(text: str, width: int, indent: str = "") -> list[str]:
    """Wrap paragraphs at spaces only: a hyphenated name or example stays whole."""
    lines: list[str] = []
    for paragraph in text.split("\n\n"):
        if lines:
            lines.append("")
        lines += textwrap.wrap(
            " ".join(paragraph.split()),
            max(width, 10),
            initial_indent=indent,
            subsequent_indent=indent,
            break_on_hyphens=False,
            break_long_words=False,
        )
    return lines


class _WrapAtSpaces:
    """Click's help layout, except that text never breaks at a hyphen.

    Click's wrapper breaks ``gpu-lost@600`` after ``gpu-``; this one keeps names,
    flags and examples whole. Mixed in before Click's ``HelpFormatter``.
    """

    width: int
    current_indent: int
    write: Callable[[str], None]

    def write_text(self, text: str) -> None:
        """Write ``text`` indented and wrapped, paragraphs kept."""
        lines = _wrap(text, self.width, " " * self.current_indent)
        self.write("\n".join(lines) + "\n")

    def write_dl(
        self, rows: Sequence[tuple[str, str]], col_max: int = 30, col_spacing: int = 2
    ) -> None:
        """Write option (or command) names and their help, as Click lays them out."""
        rows = list(rows)
        first_col = min(max((len(first) for first, _ in rows), default=0), col_max) + col_spacing
        pad = " " * (first_col + self.current_indent)
        for first, second in rows:
            self.write(" " * self.current_indent + first)
            if not second:
                self.write("\n")
                continue
            if len(first) <= first_col - col_spacing:
                self.write(" " * (first_col - len(first)))
            else:
                self.write("\n" + pad)
            lines = _wrap(second, self.width - first_col - 2) or [""]
            self.write(lines[0] + "\n")
            for line in lines[1:]:
                self.write((pad + line if line else "") + "\n")


def plain_help(command: Any) -> None:  # noqa: ANN401 - a Click command of Typer's bundled click
    """Lay out help with ``_WrapAtSpaces`` and print rich's escaped bracket as ``[``."""
    context_class = command.context_class
    formatter = type("PlainFormatter", (_WrapAtSpaces, context_class.formatter_class), {})
    command.context_class = type("PlainContext", (context_class,), {"formatter_class": formatter})
    for param in command.params:
        if isinstance(param.help, str):
            param.help = param.help.replace("\\[", "[")
    for sub in getattr(command, "commands", {}).values():
        plain_help(sub)
