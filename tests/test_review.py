"""Entry-level comparison, assembly and three-way merge (no database)."""

from generation import review

BASE = (
    "# Task Group: alpha\n\nscope: a\n\n"
    "# Task Group: beta\n\nscope: b\n\n"
    "# Task Group: gamma\n\nscope: c\n\n"
    "# Task Group: delta\n\nscope: d\n"
)


def statuses(current: str, proposed: str) -> dict[str, str]:
    return {c.title: c.status for c in review.compare(current, proposed)}


def test_entries_join_back_to_the_exact_text():
    assert "".join(e.text for e in review.entries(BASE)) == BASE


def test_compare_names_added_removed_changed_moved_and_unchanged():
    proposed = (
        "# Task Group: gamma\n\nscope: c\n\n"  # moved before alpha
        "# Task Group: alpha\n\nscope: a\n\n"
        "# Task Group: beta\n\nscope: b, reworded\n\n"  # changed
        "# Task Group: epsilon\n\nscope: e\n"  # added; delta removed
    )
    result = statuses(BASE, proposed)
    assert result == {
        "gamma": "moved",
        "alpha": "unchanged",
        "beta": "changed",
        "epsilon": "added",
        "delta": "removed",
    }


def test_assemble_keeps_current_text_for_rejected_entries_and_applies_edits():
    proposed = "# Task Group: alpha\n\nscope: A!\n\n# Task Group: new\n\nscope: n\n"
    changes = review.compare(BASE, proposed)
    keys = {c.title: c.key for c in changes}
    text = review.assemble(
        changes,
        {keys["alpha"]: "reject", keys["new"]: "accept", keys["delta"]: "reject"},
        {keys["new"]: "# Task Group: new\n\nscope: edited by a person\n"},
    )
    assert "scope: a\n" in text and "scope: A!" not in text  # rejected change: old text
    assert "scope: edited by a person" in text  # edit then accept
    assert "# Task Group: delta" in text  # rejected removal: kept
    assert "# Task Group: beta" not in text  # accepted removal


def test_merge_takes_each_sides_change_and_reports_real_conflicts():
    human = BASE.replace("scope: a\n", "scope: a (person)\n").replace(
        "scope: b\n", "scope: b (person)\n"
    )
    model = BASE.replace("scope: c\n", "scope: c (model)\n").replace(
        "scope: b\n", "scope: b (model)\n"
    )

    merged = review.merge(BASE, human, model)

    assert "scope: a (person)" in merged.text and "scope: c (model)" in merged.text
    assert [c.title for c in merged.conflicts] == ["beta"]
    assert "scope: b (person)" in merged.text  # the people's text until decided


def test_replace_entry_edits_or_deletes_one_entry_only():
    key = review.entries(BASE)[1].key
    edited = review.replace_entry(BASE, key, "# Task Group: beta\n\nscope: B\n\n")
    deleted = review.replace_entry(BASE, key, "")
    assert edited == BASE.replace("scope: b\n", "scope: B\n")
    assert "beta" not in deleted and deleted.count("# Task Group") == 3


def test_compare_on_two_thousand_entries_finds_the_one_change():
    big = "".join(f"# Task Group: g{i}\n\nscope: s{i}\n\n" for i in range(2000))
    proposed = big.replace("scope: s7\n", "scope: changed\n")
    result = review.compare(big, proposed)
    assert [c.title for c in result if c.status != "unchanged"] == ["g7"]
