"""The canary's core vocabulary: the names every plane uses for the pools, and the runbook's sections.

The sections are named here because two planes point at them: ``ops.runbook`` writes them as RUNBOOK.md's
headings, ``observability.alerts`` links each alert's ``runbook_url`` to one (``runbook_anchor``)."""

from __future__ import annotations

from typing import Literal

__all__ = ["RUNBOOK_SECTIONS", "PoolName", "runbook_anchor"]

PoolName = Literal["baseline", "candidate", "control"]

RUNBOOK_SECTIONS = {
    "status": "Check the status",
    "rollback": "Pause or roll back through the controller",
    "manual": "Manual rollback (the controller is down or does not answer)",
    "verify": "Verify",
    "events": "The event log",
}


def runbook_anchor(key: str) -> str:
    """The anchor GitHub, GitLab and most Markdown renderers give the section's heading: lower case, punctuation
    other than ``-`` dropped, spaces as ``-`` ("Manual rollback (the ...)" -> "manual-rollback-the-...")."""
    title = RUNBOOK_SECTIONS[key].lower()
    return "".join(c for c in title if c.isalnum() or c in " -").replace(" ", "-")
