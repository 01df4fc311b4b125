"""``docs/ops.md`` is what ``graphc.opdoc`` renders from the live tables (regenerate it with
``python -m graphc.opdoc > docs/ops.md`` after adding an op)."""

from __future__ import annotations

from pathlib import Path

from graphc import opdoc
from graphc.ir.ops import OP_INFO

ROOT = Path(__file__).resolve().parents[1]


def test_ops_md_matches_the_code() -> None:
    import difflib

    have, want = (ROOT / "docs" / "ops.md").read_text(), opdoc.render()
    diff = "\n".join(list(difflib.unified_diff(have.splitlines(), want.splitlines(),
                                                lineterm="", n=0))[:40])
    assert have == want, f"docs/ops.md is stale: run `python -m graphc.opdoc > docs/ops.md`\n{diff}"


def test_every_primitive_is_complete_in_the_doc() -> None:
    text = opdoc.render()
    for name in OP_INFO:
        row = next(line for line in text.splitlines() if line.startswith(f"| `{name}` |"))
        assert row.count("| yes |") + row.endswith("| yes |") >= 2, row  # CPU and PTX at least
