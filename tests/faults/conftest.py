"""The standing fault-injection suite (Ray-free: sequencer and holder run in this process, or the
sequencer in a child process where the fault is a process-level one: SIGKILL, a full disk).

Each test injects one fault kind (some several times), counts it in ``kit.faults.TALLY`` and ends
with ``kit.faults.verify``; the session summary prints the campaign's figures: faults injected
and survived, acknowledged txs checked and lost (must be 0)."""

from __future__ import annotations

import pytest
from kit.faults import TALLY


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if TALLY:
        terminalreporter.write_sep("-", "fault campaign")
        for key in ("faults injected", "faults survived", "acked txs checked", "acked txs lost"):
            terminalreporter.write_line(f"{key}: {TALLY[key]}")
