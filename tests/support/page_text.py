"""What the browser tests look for in a page's text."""

from __future__ import annotations

import re

# What a page must not show as text: data as the program holds it, not as words.
RAW_VALUES = (
    re.compile(r"[{\[]\s*[\"']"),  # a JSON object or list, a Python dict or list of strings
    re.compile(r"\b(?:None|True|False|null)\b"),  # Python's and JSON's words for values
    re.compile(r"\b[A-Z]\w+\(\w+="),  # a dataclass repr: PatchState(name=...
    re.compile(r"<[\w.]+ object at 0x"),
)
