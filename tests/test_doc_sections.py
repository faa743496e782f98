"""The figures documents' sections: each script rewrites its own and leaves the others."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

from doc_sections import write_section


def test_a_missing_document_is_made_with_its_title_whichever_script_writes_first(tmp_path: Path) -> None:
    for first in ("latency", "calibration"):
        report = tmp_path / first / "hooks.md"
        report.parent.mkdir()
        write_section(report, first, "figures\n")
        assert report.read_text(encoding="utf-8") == (
            f"# The hooks: latency and confidence\n\n<!-- {first} -->\nfigures\n<!-- /{first} -->\n"
        )


def test_a_section_is_appended_then_replaced_in_place_and_the_others_are_kept(tmp_path: Path) -> None:
    report = tmp_path / "hooks.md"
    report.write_text("# Hooks\n\n<!-- latency -->\nfast\n<!-- /latency -->\n\nA note.\n", encoding="utf-8")
    write_section(report, "calibration", "## Calibration\n\nold\n")
    appended = report.read_text(encoding="utf-8")
    assert appended == (
        "# Hooks\n\n<!-- latency -->\nfast\n<!-- /latency -->\n\nA note.\n\n"
        "<!-- calibration -->\n## Calibration\n\nold\n<!-- /calibration -->\n"
    )
    write_section(report, "latency", "slower")
    write_section(report, "calibration", "## Calibration\n\nnew\n")
    assert report.read_text(encoding="utf-8") == appended.replace("fast", "slower").replace("old", "new")
