"""Evidence beside every claim (no database): each sentence of an entry with the passage
of its cited summaries that supports it, or marked unsupported."""

from generation import evidence

SUMMARY = """# Move the local database to a new port

Rollout context: the user asked to move the local Postgres to another port.

## Task 1: Move Postgres to port 5433

Outcome: success

Key steps:

- changed `port = 5433` in config/postgres.conf and restarted the service
- the test suite reads DATABASE_URL from .env.test
"""

ENTRY = """# Task Group: local database

scope: move-local-postgres

## Task 1: Move Postgres to another port, outcome success

- Postgres listens on port 5432 after the change (config/postgres.conf).
- The test suite reads DATABASE_URL from .env.test.

### rollout_summary_files

- rollout_summaries/r1_move-postgres.md (rollout_id=r1, terminal_state=completed)

### keywords

- postgres, port
"""


def test_a_sentence_stating_another_port_than_its_summary_is_unsupported():
    claims = evidence.check(ENTRY, [("rollout_summaries/r1_move-postgres.md", SUMMARY)])
    port = next(c for c in claims if "listens" in c.text)
    assert not port.supported
    assert port.missing == ("5432",)


def test_the_supported_sentence_has_its_passage_with_the_shared_words_marked():
    claims = evidence.check(ENTRY, [("rollout_summaries/r1_move-postgres.md", SUMMARY)])
    suite = next(c for c in claims if "test suite" in c.text)
    assert suite.supported
    assert suite.passage is not None
    assert suite.passage.text == "- the test suite reads DATABASE_URL from .env.test"
    assert suite.passage.source == "rollout_summaries/r1_move-postgres.md"
    marked = [text for text, hit in evidence.highlight(suite.passage.text, suite.matched) if hit]
    assert marked == ["test", "suite", "reads", "DATABASE_URL", ".env.test"]


def test_citations_keywords_labels_and_headings_are_not_claims():
    texts = [t for _, t in evidence.claims_of(ENTRY)]
    assert texts == [
        "Postgres listens on port 5432 after the change (config/postgres.conf).",
        "The test suite reads DATABASE_URL from .env.test.",
    ]


def test_the_corrected_entry_is_supported_throughout():
    fixed = ENTRY.replace("port 5432 after the change", "port 5433 after the change")
    claims = evidence.check(fixed, [("rollout_summaries/r1_move-postgres.md", SUMMARY)])
    assert all(c.supported for c in claims)


def test_a_sentence_sharing_few_words_with_any_passage_is_unsupported():
    text = "- The user wants every commit signed with a hardware key.\n"
    (claim,) = evidence.check(text, [("s.md", SUMMARY)])
    assert not claim.supported and claim.missing == ()


def test_paragraphs_are_cut_into_sentences():
    text = "The suite reads .env.test. It needs Postgres on 5433.\n"
    assert [t for _, t in evidence.claims_of(text)] == [
        "The suite reads .env.test.",
        "It needs Postgres on 5433.",
    ]


def test_a_changed_number_of_one_or_two_digits_is_unsupported_but_a_task_reference_is_not():
    summary = "- Promote the canary after 15 minutes without errors. [Task 1]\n"
    entry = (
        "- Promote the canary after 30 minutes without errors. [Task 1]\n"
        "- Promote the canary after 15 minutes without errors (Task 2).\n"
    )
    changed, same = evidence.check(entry, [("rollout_summaries/r1_canary.md", summary)])

    assert not changed.supported and changed.missing == ("30",)
    assert same.supported
