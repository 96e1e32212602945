"""Changed copies of schema models that are validated again, as a constructor would validate them."""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel

ModelT = TypeVar("ModelT", bound=BaseModel)


def changed(model: ModelT, /, **fields: object) -> ModelT:
    """``model`` with ``fields`` replaced, through the model's validation.

    pydantic's ``model_copy(update=...)`` skips validation: a test that built its input that way could
    hand the code under test a value no producer can make (a negative count, a field of the wrong type).
    """
    return type(model).model_validate({**model.model_dump(), **fields})
