"""oracle/csvfile.py writes exactly the bytes pandas' to_csv(index=False) writes."""
import math

import numpy as np
import pandas as pd
from hypothesis import given, settings, strategies as st

from oracle.csvfile import write_csv


def same_bytes(frame: pd.DataFrame, tmp_path) -> None:
    ours, theirs = tmp_path / "ours.csv", tmp_path / "pandas.csv"
    write_csv(frame, ours)
    frame.to_csv(theirs, index=False)
    assert ours.read_bytes() == theirs.read_bytes()


def test_awkward_values_match_pandas(tmp_path):
    frame = pd.DataFrame({
        "text": pd.Series(["plain", "a,b", 'say "hi"', "two\nlines", "cr\rhere", "", None], dtype=object),
        "str": pd.Series(["x", None, "y,z", "w", "", "v", "u"], dtype="str"),
        "count": np.array([0, 0, 1, 0, 7, -3, 2 ** 40], dtype=np.int64),
        "flag": [True, False, True, True, False, False, True],
        "float": [1763796412.3456789, math.nan, 1e-7, 1e16, -0.0, math.inf, 0.1 + 0.2],
        "nullable": pd.array([1, None, 3, None, 5, 6, 7], dtype="Int64"),
        "mixed": pd.Series([None, 1, "two", 3.5, math.nan, True, "x"], dtype=object),
        "comma,header": [1, 2, 3, 4, 5, 6, 7],
    })
    same_bytes(frame, tmp_path)


def test_empty_frame_matches_pandas(tmp_path):
    same_bytes(pd.DataFrame(columns=["session", "turns"]), tmp_path)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=8), st.integers(-10 ** 12, 10 ** 12),
                          st.floats(allow_nan=True, allow_infinity=True), st.booleans()), max_size=30))
def test_random_rows_match_pandas(tmp_path_factory, rows):
    frame = pd.DataFrame(rows, columns=["text", "int", "float", "bool"])
    if not rows:
        frame = frame.astype({"int": np.int64, "float": float, "bool": bool})
    same_bytes(frame, tmp_path_factory.mktemp("csv"))
