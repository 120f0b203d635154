"""Source rewrites of a selector for the offline engines, which lack two things Kubernetes' CEL has.

* `rewrite_bind`: Kubernetes' DRA CEL environment has cel-go's `cel.bind` macro. Neither offline engine
  does, so the macro is rewritten to `[init].map(x, body)[0]`: the same value, the same type for the
  checker, the same errors.
* `default_computed_domains`: Kubernetes reads a missing attribute or capacity domain as an empty map;
  the evaluating engine has no map defaults, so a computed domain is guarded by an `in` test.

Both scan the source with string literals masked and split call arguments at the top level.
"""

from __future__ import annotations

import re
from typing import Final

_BIND_RE: Final = re.compile(r"(?<![\w.])cel\s*\.\s*bind\s*\(")
_IDENT_RE: Final = re.compile(r"^\s*([A-Za-z_]\w*)\s*$")
_OPEN: Final = "([{"
_CLOSE: Final = ")]}"


def _string_mask(text: str) -> list[bool]:
    """True at every position inside a string literal (quotes included)."""
    mask = [False] * len(text)
    i = 0
    while i < len(text):
        quote = text[i]
        if quote in "'\"":
            triple = text[i : i + 3] == quote * 3
            end_token = quote * 3 if triple else quote
            j = i + len(end_token)
            while j < len(text) and not text.startswith(end_token, j):
                j += 2 if text[j] == "\\" else 1
            j = min(len(text), j + len(end_token))
            for k in range(i, j):
                mask[k] = True
            i = j
        else:
            i += 1
    return mask


def _arguments(text: str, start: int, mask: list[bool]) -> tuple[list[str], int] | None:
    """Top-level comma-separated arguments from `start` (just after "(") and the index after ")"."""
    depth, args, current = 0, [], start
    for i in range(start, len(text)):
        if mask[i]:
            continue
        char = text[i]
        if char in _OPEN:
            depth += 1
        elif char in _CLOSE:
            if depth == 0:
                args.append(text[current:i])
                return args, i + 1
            depth -= 1
        elif char == "," and depth == 0:
            args.append(text[current:i])
            current = i + 1
    return None


def rewrite_bind(expression: str) -> str:
    """The expression with every `cel.bind(x, init, body)` as `[init].map(x, body)[0]`, innermost first."""
    while True:
        mask = _string_mask(expression)
        matches = [m for m in _BIND_RE.finditer(expression) if not mask[m.start()]]
        if not matches:
            return expression
        last = matches[-1]  # rightmost: any bind nested in it would start further right
        parsed = _arguments(expression, last.end(), mask)
        if parsed is None or len(parsed[0]) != 3 or not _IDENT_RE.match(parsed[0][0]):
            return expression  # malformed: leave it to the checker to report
        (name, init, body), end = parsed
        replacement = f"[{init.strip()}].map({name.strip()}, {body.strip()})[0]"
        expression = expression[: last.start()] + replacement + expression[end:]


#: `device.attributes[` / `device.capacity[`, whatever the domain expression; and a literal domain.
_ANY_DOMAIN_LOOKUP_RE: Final = re.compile(r"(?<![\w.])device\s*\.\s*(attributes|capacity)\s*\[")
_LITERAL_RE: Final = re.compile(r"""\s*(?:'[^'\\]*'|"[^"\\]*")\s*""")


def default_computed_domains(source: str) -> str:
    """`device.attributes[e]` with a computed domain `e` as `(e in ... ? device.attributes[e] : {})`.

    Kubernetes reads a missing domain as an empty map; the evaluating engine has no map defaults, so
    literal domains get empty maps in the context (`environment.DeviceContext`) and computed ones this
    rewrite.
    """
    mask = _string_mask(source)
    out: list[str] = []
    position = 0
    for match in _ANY_DOMAIN_LOOKUP_RE.finditer(source):
        if match.start() < position or mask[match.start()]:
            continue
        parsed = _arguments(source, match.end(), mask)
        if parsed is None or len(parsed[0]) != 1 or _LITERAL_RE.fullmatch(parsed[0][0]):
            continue  # a literal domain, or malformed (the checker reports it)
        key = default_computed_domains(parsed[0][0].strip())
        field = f"device.{match.group(1)}"
        out.append(source[position : match.start()])
        out.append(f"(({key}) in {field} ? {field}[{key}] : {{}})")
        position = parsed[1]
    out.append(source[position:])
    return "".join(out)
