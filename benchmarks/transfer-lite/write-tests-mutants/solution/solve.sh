#!/bin/bash
cat > /app/test_intervals.py <<'PY'
from intervals import contains, merge, total_length


def test_merge_sorts_and_merges_overlaps():
    assert merge([(5, 8), (1, 3), (2, 4)]) == [(1, 4), (5, 8)]


def test_merge_touching_intervals():
    assert merge([(1, 3), (3, 5)]) == [(1, 5)]
    assert merge([(1, 3), (4, 5)]) == [(1, 3), (4, 5)]


def test_merge_nested_interval():
    assert merge([(1, 10), (2, 3)]) == [(1, 10)]


def test_merge_does_not_modify_input():
    data = [(5, 6), (1, 2)]
    merge(data)
    assert data == [(5, 6), (1, 2)]


def test_merge_empty():
    assert merge([]) == []


def test_total_length_counts_overlaps_once():
    assert total_length([(2, 5)]) == 3
    assert total_length([(1, 4), (2, 6)]) == 5
    assert total_length([]) == 0


def test_contains_includes_end_points():
    assert contains([(1, 3)], 1)
    assert contains([(1, 3)], 3)
    assert contains([(1, 3)], 2)
    assert not contains([(1, 3)], 4)
PY
