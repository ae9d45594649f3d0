"""The one journalled publish (``generation.journal.publish``) that write-back and
snapshot export both run: its order, and what a failure does, seen from the calls it
makes. The crash tests of both callers (test_writeback.py) check the disk and the audit
log at every step."""

import pytest

from generation import journal


class Staging(Exception):
    pass


def run(calls, *, journalled=True, fails_in=None, audits_failure=True):
    def call(name, result=None):
        def made(*args):
            calls.append((name, *args))
            if name == fails_in:
                raise Staging(name)
            return result

        return made

    return journal.publish(
        begin=call("begin", journalled),
        stage=call("stage"),
        put_in_place=call("put_in_place"),
        undo=lambda exc: calls.append(("undo", str(exc))) or exc,
        audit=lambda failure: (
            calls.append(("audit", failure and str(failure))) or failure is None or audits_failure
        ),
        finish=lambda failure: calls.append(("finish", failure and str(failure))),
        step=lambda name: calls.append(name),
        failures=(Staging,),
    )


def test_a_publish_goes_journal_stage_place_audit_committed_finish_done():
    calls = []
    assert run(calls) is None
    assert calls == [
        ("begin",),
        "journal",
        ("stage",),
        ("put_in_place",),
        ("audit", None),
        "committed",
        ("finish", None),
        "done",
    ]


def test_nothing_to_write_writes_no_journal_and_removes_none():
    calls = []
    run(calls, journalled=False)
    assert calls == [("begin",), ("audit", None), "committed", "done"]


def test_a_failure_is_undone_then_audited_and_returned_once_committed():
    calls = []
    failure = run(calls, fails_in="put_in_place")
    assert str(failure) == "put_in_place"
    assert calls[4:] == [
        ("undo", "put_in_place"),
        ("audit", "put_in_place"),
        "committed",
        ("finish", "put_in_place"),
        "done",
    ]


def test_a_failure_that_audits_nothing_is_raised_after_its_journal_goes_without_a_step():
    calls = []
    with pytest.raises(Staging):
        run(calls, fails_in="stage", audits_failure=False)
    assert calls[-3:] == [("undo", "stage"), ("audit", "stage"), ("finish", "stage")]
    assert "committed" not in calls and "done" not in calls
