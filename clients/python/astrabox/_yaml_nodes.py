"""Strict reading of the YAML files definitions are written in (agent files, environment files):
composed nodes checked one value at a time, each mistake an error naming the file, the line, the
key and what is valid there; and writing them back as a person would.

Reading works on the composed nodes rather than loaded values, so that every error knows its line:
an unknown or repeated key, a value of the wrong type, a count or size over a limit.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, Protocol, TypeVar

import yaml

__all__ = ["TAG", "Dumper", "YamlNodes", "documents", "parse_file", "read_file"]


class Named(Protocol):
    """What a file defines: a name, unique in the file, and where it was written ("FILE:LINE")."""

    @property
    def name(self) -> str: ...

    @property
    def source(self) -> str: ...


Definition = TypeVar("Definition", bound=Named)

TAG = "tag:yaml.org,2002:"


def documents(loader: yaml.SafeLoader) -> list[yaml.Node]:
    """The non-empty documents of the file `loader` reads (an empty one: a trailing `---`)."""
    found = []
    while loader.check_node():
        node = loader.get_node()
        if node is not None and node.tag != TAG + "null":
            found.append(node)
    return found


def read_file(path: Path, error: type[ValueError]) -> str:
    """The UTF-8 text of the file at `path`; `error` says why there is none."""
    try:
        return path.read_text(encoding="utf-8")
    except OSError as failure:
        raise error(f"{path}: cannot read it: {failure.strerror}") from failure
    except UnicodeDecodeError as failure:
        raise error(f"{path}: not UTF-8 text") from failure


def parse_file(
    text: str,
    source: str,
    error: type[ValueError],
    kind: str,
    reader: Callable[[yaml.SafeLoader], Callable[[yaml.Node], Definition]],
) -> list[Definition]:
    """The definitions of a file's `text`, one per YAML document, each read by what `reader` makes
    of the file's loader; none, invalid YAML or a name defined twice is `error` (`kind`: "agent")."""
    loader = yaml.SafeLoader(text)
    try:
        nodes = documents(loader)
        if not nodes:
            raise error(f"{source}: no {kind} in it (a document with at least `name:`)")
        read = reader(loader)
        found = [read(node) for node in nodes]
    except yaml.MarkedYAMLError as failure:
        line = failure.problem_mark.line + 1 if failure.problem_mark else 1
        raise error(f"{source}:{line}: not valid YAML: {failure.problem}") from failure
    finally:
        loader.dispose()
    seen: dict[str, str] = {}
    for definition in found:
        if definition.name in seen:
            raise error(
                f"{definition.source}: name: {definition.name!r} is defined twice (first at {seen[definition.name]})"
            )
        seen[definition.name] = definition.source
    return found


class YamlNodes:
    """Reads values out of the nodes of one file; a mistake raises `error` with the file and line.
    `top` names the top level in messages (a key path is empty there)."""

    def __init__(self, source: str, loader: yaml.SafeLoader, error: type[ValueError], top: str) -> None:
        self._source = source
        self._loader = loader
        self._error = error
        self._top = top

    def mapping(
        self, node: yaml.Node, what: str, valid: Sequence[str] | None, required: Sequence[str] = ()
    ) -> dict[str, yaml.Node]:
        """The keys of a mapping node and their value nodes (empty values left out); `valid` None
        takes any key."""
        if not isinstance(node, yaml.MappingNode):
            expected = f"a mapping of {', '.join(valid)}" if valid else "a mapping"
            self.fail(node, what, f"must be {expected}")
        fields: dict[str, yaml.Node] = {}
        seen: set[str] = set()
        for key_node, value in node.value:
            key = self.text(key_node, what)
            if valid is not None and key not in valid:
                close = difflib.get_close_matches(key, valid, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ";"
                self.fail(key_node, what, f"unknown key {key!r}{hint} valid keys: {', '.join(valid)}")
            if key in seen:
                self.fail(key_node, join(what, key), "given twice")
            seen.add(key)
            if value.tag != TAG + "null":
                fields[key] = value
        for key in required:
            if key not in fields:
                self.fail(node, what, f"{key!r} is required")
        return fields

    def sequence(self, node: yaml.Node, what: str, most: int | None = None) -> list[yaml.Node]:
        if not isinstance(node, yaml.SequenceNode):
            self.fail(node, what, "must be a list")
        if most is not None and len(node.value) > most:
            self.fail(node, what, f"{len(node.value)} entries, over the limit of {most}")
        return list(node.value)

    def scalar(self, node: yaml.Node, what: str, kinds: tuple[str, ...], expected: str) -> Any:
        if not isinstance(node, yaml.ScalarNode) or node.tag not in {TAG + k for k in kinds}:
            quote = " (quote it to make it text)" if isinstance(node, yaml.ScalarNode) and "str" in kinds else ""
            self.fail(node, what, f"must be {expected}{quote}")
        return self._loader.construct_object(node)

    def text(self, node: yaml.Node, what: str, most: int | None = None, empty: bool = True) -> str:
        text: str = self.scalar(node, what, ("str",), "text")
        if most is not None and (size := len(text.encode())) > most:
            self.fail(node, what, f"{size} bytes, over the limit of {most}")
        if not empty and not text:
            self.fail(node, what, "must not be empty")
        return text

    def texts(self, node: yaml.Node, what: str, most: int, each_most: int | None = None) -> list[str]:
        return [
            self.text(item, f"{what}[{i}]", most=each_most) for i, item in enumerate(self.sequence(node, what, most))
        ]

    def count(self, node: yaml.Node, what: str) -> int:
        value: int = self.scalar(node, what, ("int",), "a whole number")
        if not 0 <= value < 2**31:
            self.fail(node, what, f"{value} is not between 0 and {2**31 - 1}")
        return value

    def unique(self, nodes: Sequence[yaml.Node], names: Sequence[str], what: str) -> None:
        seen: set[str] = set()
        for node, name in zip(nodes, names, strict=True):
            if name in seen:
                self.fail(node, what, f"{name!r} is given twice")
            seen.add(name)

    def where(self, node: yaml.Node) -> str:
        return f"{self._source}:{node.start_mark.line + 1}"

    def fail(self, node: yaml.Node, what: str, problem: str) -> NoReturn:
        raise self._error(f"{self.where(node)}: {what or self._top}: {problem}")


def join(what: str, key: str) -> str:
    return f"{what}.{key}" if what else key


class Dumper(yaml.SafeDumper):
    """Writes as a person would: text of several lines as a block (`|`), a list of names on one line."""


def _represent_text(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    return dumper.represent_scalar(TAG + "str", text, style="|" if "\n" in text else None)


def _represent_list(dumper: yaml.SafeDumper, items: list[Any]) -> yaml.SequenceNode:
    names = all(isinstance(item, str) and "\n" not in item and len(item) <= 64 for item in items)
    return dumper.represent_sequence(TAG + "seq", items, flow_style=names)


Dumper.add_representer(str, _represent_text)
Dumper.add_representer(list, _represent_list)
