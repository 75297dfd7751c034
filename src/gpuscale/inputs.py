"""Files and YAML a user hands us, bounded before they are parsed.

Every configuration file gpuscale reads (web-config, alert settings, GPUScaler
files, counters files, rate traces) comes through here, so one set of limits
holds everywhere: a file must be a regular file of at most ``MAX_FILE_BYTES``
(``/dev/zero`` or a FIFO would never end), valid UTF-8 without NUL bytes, and
YAML may not expand, with its aliases written out, past ``MAX_YAML_NODES``
values (a few hundred bytes of nested aliases expand into billions) nor nest
deeper than ``MAX_YAML_DEPTH``. Each
refusal is one line naming the file, the place and the limit; none quotes the
file's content, which may be a secret.
"""

import itertools
import os
import re
import stat
from pathlib import Path
from typing import Protocol

import yaml

from gpuscale.errors import config_error

MAX_FILE_BYTES = 1 << 20
"""The largest configuration file read (1 MiB); real ones are a few KiB."""
MAX_YAML_DEPTH = 64
"""The deepest nesting of YAML mappings and sequences accepted; real configs use under 10."""
_BRACKETS = re.compile(r"[^\[\]{}]+")
_BRACKET = re.compile(r"[\[\]{}]")
MAX_YAML_NODES = 10_000
"""The most values (keys, scalars, collections) a file may expand to. Real configs hold a
few hundred (a GPUScaler target about 25); PyYAML composes some 30,000 a second on a busy
core, so the limit also bounds the time."""


class Where(Protocol):
    """(line, column), both 1-based or None -> the ``where`` of an error, e.g. ``web.yml:4:3``."""

    def __call__(self, line: int | None = None, column: int | None = None) -> str:
        """Name the place."""
        ...


def file_where(path: Path | str) -> Where:
    """The ``Where`` naming ``path`` and a line and column in it.

    Returns:
        A function giving ``path``, ``path:LINE`` or ``path:LINE:COLUMN``.
    """

    def where(line: int | None = None, column: int | None = None) -> str:
        place = "" if line is None else f":{line}" + ("" if column is None else f":{column}")
        return f"{path}{place}"

    return where


def _line_column(data: bytes, offset: int) -> tuple[int, int]:
    line = data.count(b"\n", 0, offset) + 1
    return line, offset - (data.rfind(b"\n", 0, offset) + 1) + 1


def _text_place(text: str, offset: int) -> tuple[int, int]:
    """1-based (line, column) of a character of ``text``."""
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def read_text_file(path: Path, flag: str, *, limit: int = MAX_FILE_BYTES) -> str:
    """Read a user's text file, refusing what is not a small regular UTF-8 file.

    Args:
        path: The file.
        flag: The option that named it, for the fix (e.g. ``--web-config-file``).
        limit: Most bytes accepted.

    Returns:
        The text.

    Raises:
        ConfigError: Not a regular file, larger than ``limit``, unreadable, not
            UTF-8 or holding a NUL byte; the message names the file (and the line
            and column of a bad byte), never the content.
    """
    where = file_where(path)
    fix = f"check the {flag} path and permissions"
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer before fstat can refuse it.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise config_error(where(), "is not a regular file", f"give {flag} a file")
            data = handle.read(limit + 1)
    except OSError as exc:
        raise config_error(where(), f"cannot be read ({exc.strerror or exc})", fix) from None
    if len(data) > limit:
        raise config_error(where(), f"is larger than {limit} bytes", "give a smaller file")
    nul = data.find(b"\0")
    if nul >= 0:
        raise config_error(where(*_line_column(data, nul)), "holds a NUL byte", "save it as text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise config_error(
            where(*_line_column(data, exc.start)), "is not UTF-8", "save it as UTF-8"
        ) from None


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader that bounds the document as its aliases expand it.

    Aliases are legitimate (``yaml.safe_dump`` writes them for shared values),
    so they are counted rather than refused: the file's values are counted as
    they are composed, each alias at the size of what it repeats, and each
    node's height is that of its tree with aliases written out; passing
    ``MAX_YAML_NODES`` or ``MAX_YAML_DEPTH`` stops the parse there.
    """

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self._bounds: dict[int, tuple[int, int]] = {}  # id(node) -> (nodes, height) expanded
        self._open = 0  # nodes being composed: the depth of the text's own nesting
        self._nodes = 0  # values composed so far, each alias counted at its expanded size

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
        alias = self.check_event(yaml.AliasEvent)
        self._open += 1  # checked on the way down too: composing recurses once per level
        try:
            if self._open > MAX_YAML_DEPTH:
                problem = f"nests deeper than {MAX_YAML_DEPTH} levels"
                raise yaml.composer.ComposerError(None, None, problem, mark)
            node: yaml.Node | None = super().compose_node(parent, index)
        finally:
            self._open -= 1
        if node is None:
            return None
        if alias:
            if id(node) not in self._bounds:  # a node still open: the alias is inside it
                problem = "an alias refers to a node that contains it"
                raise yaml.composer.ComposerError(None, None, problem, mark)
            self._count(self._bounds[id(node)][0], mark)
            return node
        self._count(1, mark)
        children: list[yaml.Node] = []
        if isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        sizes = [self._bounds[id(child)] for child in children]
        nodes = 1 + sum(size[0] for size in sizes)
        height = 1 + max((size[1] for size in sizes), default=0)
        if height > MAX_YAML_DEPTH:
            problem = f"nests deeper than {MAX_YAML_DEPTH} levels"
            raise yaml.composer.ComposerError(None, None, problem, mark)
        self._bounds[id(node)] = (nodes, height)
        return node

    def _count(self, nodes: int, mark: yaml.error.Mark) -> None:
        """Add to the document's size so far (its expanded size once it ends)."""
        self._nodes += nodes
        if self._nodes > MAX_YAML_NODES:
            problem = f"expands (aliases written out) to more than {MAX_YAML_NODES} values"
            raise yaml.composer.ComposerError(None, None, problem, mark)


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _check_flow_depth(text: str, where: Where) -> None:
    """Refuse brackets nested past ``MAX_YAML_DEPTH`` before PyYAML scans them.

    PyYAML's scanner looks up to 1,024 characters ahead for a simple key and
    pays for every open bracket on each step, so a run of ``[`` costs a second
    before the composer's own limit is reached. Brackets inside quoted strings
    count too, which overstates depth only for strings holding dozens of
    unmatched brackets.
    """
    brackets = _BRACKETS.sub("", text)
    depth = itertools.accumulate(1 if c in "[{" else -1 for c in brackets)
    if max(depth, default=0) <= MAX_YAML_DEPTH:
        return
    count = 0
    for match in _BRACKET.finditer(text):
        count += 1 if match.group() in "[{" else -1
        if count > MAX_YAML_DEPTH:
            problem = f"YAML syntax error: nests deeper than {MAX_YAML_DEPTH} levels"
            place = where(*_text_place(text, match.start()))
            raise config_error(place, problem, "write a flatter document")


_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")


def _yaml_problem(exc: yaml.MarkedYAMLError) -> str:
    """PyYAML's description of a syntax error, without the file's text it quotes.

    PyYAML quotes what it could not read (``found undefined tag handle '!x'``), which
    may be a secret the file holds; token kinds (``'<block end>'``) stay.
    """
    problem = _one_line(exc.problem)
    return _QUOTED.sub(lambda m: m.group(0) if m.group(0).startswith("'<") else "…", problem)


def load_yaml(text: str, where: Where) -> list[tuple[object, yaml.Node]]:
    """Parse every YAML document of ``text`` once: each one's data and its node tree.

    The node tree gives each key's line for messages; the data is built from
    the same tree, so the text is parsed once.

    Args:
        text: The file's text (already bounded by ``read_text_file``).
        where: Names the file and a place in it.

    Returns:
        (data, node) per non-empty document, in order.

    Raises:
        ConfigError: A syntax error, or a document past the size or nesting
            limits, at its line and column.
    """
    _check_flow_depth(text, where)
    try:
        loader = _BoundedLoader(text)
    except yaml.reader.ReaderError as exc:  # a control character: say which, not the text
        problem = f"holds a character YAML does not allow (U+{exc.character:04X})"
        raise config_error(where(*_text_place(text, exc.position)), problem, "remove it") from None
    documents: list[tuple[object, yaml.Node]] = []
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is not None:
                documents.append((loader.construct_document(node), node))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        place = where(mark.line + 1, mark.column + 1) if mark is not None else where()
        refused = isinstance(exc, yaml.composer.ComposerError)
        fix = (
            "write a smaller, flatter document, no alias inside its anchor"
            if refused
            else "fix the YAML there"
        )
        raise config_error(place, f"YAML syntax error: {_yaml_problem(exc)}", fix) from None
    except (yaml.YAMLError, ValueError, OverflowError, RecursionError) as exc:
        why = f"YAML error: {type(exc).__name__}"
        raise config_error(where(), why, "fix the YAML") from None
    finally:
        loader.dispose()
    return documents
