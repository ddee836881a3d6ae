"""The runner's numpy copies of block lists (table_arrays.py) and the token ranges a step reads: a decode
step's host work must not rebuild a whole context's lists, and what it reuses must equal what it would build."""

import numpy as np
import pytest

from strata.runner.table_arrays import TableArrays
from strata.scheduler.request_state import RequestState
from strata.types import Request, SamplingParams


def test_an_unchanged_list_reuses_its_array_and_any_change_converts_again():
    arrays, tables = TableArrays(), {3: list(range(100, 8292))}
    first = arrays.get(tables, 3)
    assert arrays.get(tables, 3) is first                       # unchanged: the same array, no conversion
    np.testing.assert_array_equal(first, tables[3])
    tables[3].append(9000)                                      # a new block
    grown = arrays.get(tables, 3)
    assert grown is not first and grown[-1] == 9000 and len(grown) == 8193
    tables[3][0] = -1                                           # a block moved to the host tier, in place
    np.testing.assert_array_equal(arrays.get(tables, 3), tables[3])
    del tables[3][5:]                                           # a rollback truncates
    np.testing.assert_array_equal(arrays.get(tables, 3), tables[3])
    assert arrays.get(tables, 7).shape == (0,)                  # a slot the dict lacks: its default
    with pytest.raises(ValueError):
        first[0] = 1                                            # shared with later steps: read-only


def test_two_dicts_with_the_same_slot_keep_their_own_arrays():
    arrays, main, mtp = TableArrays(), {0: [1, 2, 3]}, {0: [7, 8]}
    assert arrays.get(main, 0).tolist() == [1, 2, 3]
    assert arrays.get(mtp, 0).tolist() == [7, 8]
    assert arrays.get(main, 0).tolist() == [1, 2, 3]


@pytest.mark.parametrize("start, end", [(0, 5), (2, 10), (10, 13), (4, 4), (9, 11), (0, 13)])
def test_token_range_equals_a_slice_of_all_tokens(start, end):
    state = RequestState(Request("r", list(range(10)), SamplingParams()), eos_token_ids=set())
    state.output_token_ids = [100, 101, 102]
    assert state.token_range(start, end) == state.all_token_ids()[start:end]
