"""The C sources of ahead-of-time libraries, as templates: files under ``graphc/aot/c/``.

The C that does not depend on the step (state handling, checkpoint writer and reader, error
strings, the public ``GRAPHC_*`` codes) lives in real ``.c`` / ``.h`` files shipped as package
data and read with :mod:`importlib.resources`; :mod:`graphc.aot.csource` fills in the parts
that do depend on it. The template language is deliberately small:

- ``@MARKER@`` (upper-case letters, digits and underscores between two ``@``) is replaced by a
  value, inline;
- a line holding nothing but one marker is a *block*: it becomes the value's lines, and
  disappears when the value is empty (so optional statements leave no blank line);
- lines that start with ``//@`` describe the template itself and are dropped.

Every marker in a template must be given a value and every value given must be used by the
template, so a renamed marker fails the build instead of leaking ``@X@`` into C. The step's
binary-interface constants (:mod:`graphc.codegen.abi`) are available in every template as
``@TABLE_FIXED@``, ``@ERR_WORDS@``, ``@ERR_OK@``, ``@ERR_INDEX@``, ``@ERR_SCRATCH@``,
``@ERR_NONFINITE@``, ``@ERR_BOUNDS@`` and ``@ALIGN@``, so the C never restates them.
"""

from __future__ import annotations

import functools
import re
from importlib import resources

from graphc.codegen import abi

__all__ = ["ABI_VALUES", "TemplateError", "markers", "read", "render"]

MARKER = re.compile(r"@([A-Z][A-Z0-9_]*)@")

# the binary-interface constants every template may use (codegen/abi.py is their definition)
ABI_VALUES: dict[str, str] = {
    key: str(getattr(abi, key))
    for key in ("TABLE_FIXED", "ERR_WORDS", "ERR_OK", "ERR_INDEX", "ERR_SCRATCH",
                "ERR_NONFINITE", "ERR_BOUNDS", "ALIGN")
}


class TemplateError(ValueError):
    """A template and the values given for it do not fit (a missing or unused marker)."""


@functools.cache
def read(name: str) -> str:
    """The text of template ``name`` (a file under ``graphc/aot/c/``), its ``//@`` lines
    removed."""
    text = resources.files(__package__).joinpath("c", name).read_text(encoding="utf-8")
    return "".join(line for line in text.splitlines(keepends=True)
                   if not line.startswith("//@"))


def markers(name: str) -> set[str]:
    """The markers template ``name`` uses."""
    return set(MARKER.findall(read(name)))


def render(name: str, **values: object) -> str:
    """Template ``name`` with every marker replaced (see the module docstring)."""
    text = read(name)
    used = set(MARKER.findall(text))
    given = {k: str(v) for k, v in values.items()}
    missing = used - set(given) - set(ABI_VALUES)
    unused = set(given) - used
    if missing or unused:
        raise TemplateError(f"{name}: markers without a value: {sorted(missing)}; values "
                            f"without a marker: {sorted(unused)}")
    table = {**ABI_VALUES, **given}
    out: list[str] = []
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\n")
        m = MARKER.fullmatch(body)
        if m:  # a block: the value's lines, or nothing
            value = table[m.group(1)]
            if value:
                out.append(value if value.endswith("\n") else value + "\n")
            continue
        # one pass: text inside a substituted value is never scanned again
        out.append(MARKER.sub(lambda mm: table[mm.group(1)], line))
    return "".join(out)
