"""The one strict pydantic base for specguard's file formats and requests.

A key a format does not define is an error, never silently dropped: a misspelt key in a check plan or a
prompt file would otherwise change nothing and say nothing. ``FiniteModel`` also refuses NaN and infinity,
for models that hold user input (an option or a plan key), where they mean nothing.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FiniteModel(StrictModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
