"""Adding entries to a config file's text, keeping every other byte (comments included).

The positions come from PyYAML's own parse of the file (node marks), not from reading the text
by hand: a new item goes after the last line of the collection's last item, indented as its
first item is; an empty flow collection (`series: []`) becomes a block one. `carry init` uses
it; the result is validated by the loader before it is written.
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml


class EditRefused(Exception):
    """The text cannot be edited safely; the message says what to add by hand."""


@dataclass(frozen=True)
class _Span:
    start: int  # offset of the first character of the item's first line
    end: int  # offset just after the item's last line (its newline included)


def _compose(text: str) -> yaml.MappingNode:
    node = yaml.compose(text, Loader=yaml.SafeLoader)
    if not isinstance(node, yaml.MappingNode):
        raise EditRefused("the config's top level is not a mapping")
    return node


def _line_starts(text: str) -> list[int]:
    starts = [0]
    for index, char in enumerate(text):
        if char == "\n":
            starts.append(index + 1)
    return starts


def _value(root: yaml.MappingNode, key: str) -> yaml.Node | None:
    for key_node, value_node in root.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.value == key:
            return value_node
    return None


def _last_mark(node: yaml.Node) -> yaml.Mark:
    """Where the last character of a node's content is: a block collection's own end mark
    lies after the comments and blank lines that follow it, so descend into its last child."""
    if isinstance(node, yaml.MappingNode) and not node.flow_style and node.value:
        return _last_mark(node.value[-1][1])
    if isinstance(node, yaml.SequenceNode) and not node.flow_style and node.value:
        return _last_mark(node.value[-1])
    return node.end_mark


def _end_of(node: yaml.Node, starts: list[int], size: int) -> int:
    """Offset just after the line holding the node's last character."""
    mark = _last_mark(node)
    line = mark.line if mark.column > 0 else mark.line - 1
    return starts[line + 1] if line + 1 < len(starts) else size


def _item_spans(text: str, node: yaml.SequenceNode) -> list[_Span]:
    starts = _line_starts(text)
    return [
        _Span(starts[item.start_mark.line], _end_of(item, starts, len(text))) for item in node.value
    ]


def _with_final_newline(text: str) -> str:
    return text if not text or text.endswith("\n") else text + "\n"


def _insert(
    text: str, node: yaml.nodes.CollectionNode, key: str, block: str, key_indent: int
) -> str:
    """`block` (lines indented by two, as for a fresh file) added to the collection `node`."""
    if node.flow_style:
        if node.value:
            raise EditRefused(f"'{key}' is written in flow style ([...] or {{...}})")
        # `series: []` -> `series:` and the block below it.
        start, end = node.start_mark.index, node.end_mark.index
        return text[:start].rstrip(" ") + "\n" + _reindent(block, key_indent + 2) + text[end:]
    first = node.value[0]
    first_node = first[0] if isinstance(node, yaml.MappingNode) else first
    indent = first_node.start_mark.column
    if isinstance(node, yaml.SequenceNode):
        line = text.splitlines()[first_node.start_mark.line]
        indent = line.index("-") if "-" in line[:indent] else max(indent - 2, 0)
    starts = _line_starts(text)
    at = _end_of(node, starts, len(text))
    if at == len(text):
        text = _with_final_newline(text)
        at = len(text)
    return text[:at] + _reindent(block, indent) + text[at:]


def _reindent(block: str, indent: int) -> str:
    """A block written with a two-space indent, moved to `indent`."""
    shift = indent - 2
    lines = block.splitlines(keepends=True)
    if shift >= 0:
        return "".join(" " * shift + line for line in lines)
    return "".join(line[-shift:] if line.startswith(" " * -shift) else line for line in lines)


def add_upstream(text: str, block: str) -> str:
    """The config text with `block` (one `upstreams:` entry, indented by two) added."""
    return _append(text, "upstreams", yaml.MappingNode, "mapping", block)


def add_series(text: str, block: str) -> str:
    """The config text with `block` (items of `series:`, indented by two) added at the end."""
    return _append(text, "series", yaml.SequenceNode, "list", block)


def _append(text: str, name: str, kind: type[yaml.CollectionNode], what: str, block: str) -> str:
    root = _compose(text)
    node = _value(root, name)
    if not isinstance(node, kind):
        raise EditRefused(f"the config has no '{name}:' {what} to add to")
    key = next(k for k, v in root.value if v is node)
    return _insert(text, node, name, block, key.start_mark.column)


def replace_series(text: str, series_id: str, block: str) -> str:
    """The config text with the `series:` item whose id is `series_id` replaced by `block`."""
    root = _compose(text)
    node = _value(root, "series")
    if not isinstance(node, yaml.SequenceNode) or node.flow_style:
        raise EditRefused("the config's 'series:' is not a block list")
    for item, span in zip(node.value, _item_spans(text, node), strict=True):
        if isinstance(item, yaml.MappingNode):
            found = _value(item, "id")
            if isinstance(found, yaml.ScalarNode) and found.value == series_id:
                line = text[span.start : text.find("\n", span.start) + 1 or len(text)]
                indent = line.index("-") if "-" in line else 0
                return text[: span.start] + _reindent(block, indent) + text[span.end :]
    raise EditRefused(f"no series {series_id!r} in the config")
